#pragma once
// Internal to the chat-template engine: the syntax tree the parser builds and the evaluator
// walks. Every node carries its template line for error messages.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja_value.hpp"

namespace tpullm::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

/// One expression node. `kind` says which members are used.
struct Expr {
  enum class Kind {
    literal,   ///< value
    name,      ///< name
    list,      ///< args = items
    tuple,     ///< args = items (evaluates to a list)
    dict,      ///< args = key, value, key, value, ...
    attr,      ///< args[0] . name
    subscript, ///< args[0] [ args[1] ]
    slice,     ///< args[0] [ args[1] : args[2] : args[3] ] (null entries for omitted parts)
    call,      ///< args[0] ( args[1..], kwargs )
    filter,    ///< args[0] | name ( args[1..], kwargs )
    test,      ///< args[0] is [not] name ( args[1..], kwargs )
    unary,     ///< name ("-", "+", "not") args[0]
    binary,    ///< args[0] name args[1] (+ - * / // % ** ~ == != < <= > >= in "not in")
    and_,      ///< args[0] and args[1]
    or_,       ///< args[0] or args[1]
    cond,      ///< args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;       ///< `is not`
  bool parenthesized = false; ///< written in parentheses (so not part of a comparison chain)
  int depth = 1;              ///< height of this subtree (bounded, so evaluation cannot overflow)
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
/// A sequence of statements.
using Body = std::vector<NodePtr>;

/// One statement (template data, an output, a block tag).
struct Node {
  enum class Kind {
    text,      ///< text
    output,    ///< {{ expr }}
    if_,       ///< branches: (cond, body) ... with a null cond for else
    for_,      ///< for targets in expr [if cond]: body [else: else_body]
    set,       ///< set targets[0] = expr (targets.size() > 1: unpacking)
    set_attr,  ///< set targets[0].targets[1] = expr
    set_block, ///< set targets[0] %} body {% endset
    macro,     ///< macro targets[0](targets[1..] = defaults) body
    break_,    ///< break
    continue_, ///< continue
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::vector<ExprPtr> defaults; ///< macro parameter defaults (null: none), one per parameter
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
};

/// A parsed template.
struct Template {
  std::string source;
  Body body;
};

/// Parses a template source (Jinja subset, trim_blocks + lstrip_blocks). Throws tpullm::Error.
Template parse_template(std::string source);

/// Renders a template with `globals` (an object) within `limits`. Throws tpullm::Error.
std::string render_template(const Template& t, const Json& globals, const RenderLimits& limits);

} // namespace tpullm::text::jinja
