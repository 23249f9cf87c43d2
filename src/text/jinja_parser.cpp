// Template parser: tokens -> syntax tree, with Jinja2's operator precedence (filters and tests
// bind tighter than arithmetic, `not` looser than comparisons). Tags outside the subset are
// refused by name and line.
#include <algorithm>
#include <initializer_list>
#include <set>

#include "jinja_ast.hpp"
#include "jinja_builtins.hpp"
#include "jinja_lexer.hpp"

namespace tpullm::text::jinja {
namespace {

using TK = Token::Kind;

ExprPtr make(Expr::Kind k, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  e->line = line;
  return e;
}

// Sets e's subtree height from its children; a tree taller than 300 (a chain like
// 1 + 1 + ... thousands long) is refused, so evaluating and destroying it cannot overflow the
// stack.
ExprPtr& sized(ExprPtr& e) {
  int d = 0;
  for (const ExprPtr& a : e->args)
    if (a)
      d = std::max(d, a->depth);
  for (const auto& [k, v] : e->kwargs)
    d = std::max(d, v->depth);
  e->depth = d + 1;
  if (e->depth > 300)
    refuse(e->line, "expression nested more than 300 deep");
  return e;
}

ExprPtr make2(Expr::Kind k, int line, std::string name, ExprPtr a, ExprPtr b) {
  auto e = make(k, line);
  e->name = std::move(name);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  sized(e);
  return e;
}

class Parser {
public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    std::string end;
    Body b = parse_body({}, end);
    return b;
  }

private:
  const Token& peek(std::size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& tk = t_[i_];
    if (i_ + 1 < t_.size())
      ++i_;
    return tk;
  }
  bool at_op(std::string_view op, std::size_t k = 0) const {
    return peek(k).kind == TK::op && peek(k).text == op;
  }
  bool at_name(std::string_view n, std::size_t k = 0) const {
    return peek(k).kind == TK::name && peek(k).text == n;
  }
  static std::string describe(const Token& tk) {
    switch (tk.kind) {
    case TK::eof:
      return "end of template";
    case TK::block_end:
      return "'%}'";
    case TK::var_end:
      return "'}}'";
    case TK::text:
      return "template data";
    case TK::var_begin:
    case TK::block_begin:
    case TK::name:
    case TK::op:
    case TK::integer:
    case TK::floating:
      return "'" + tk.text + "'";
    case TK::string:
      return "a string";
    }
    return "token";
  }
  void expect_op(std::string_view op) {
    if (!at_op(op))
      fail(peek().line, str_cat("expected '", op, "', found ", describe(peek())));
    next();
  }
  std::string expect_name() {
    if (peek().kind != TK::name)
      fail(peek().line, str_cat("expected a name, found ", describe(peek())));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TK::block_end)
      fail(peek().line, str_cat("expected '%}', found ", describe(peek())));
    next();
  }

  // Statements until one of `ends` (a block tag name); `found` gets the name that ended it.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string& found) {
    Body body;
    while (true) {
      const Token& tk = peek();
      switch (tk.kind) {
      case TK::eof:
        if (ends.size() != 0)
          fail(tk.line,
               str_cat("unexpected end of template, expected '{% ", *(ends.end() - 1), " %}'"));
        return body;
      case TK::text: {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::text;
        n->line = tk.line;
        n->text = tk.text;
        next();
        body.push_back(std::move(n));
        break;
      }
      case TK::var_begin: {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::output;
        n->line = tk.line;
        next();
        n->expr = parse_tuple_or_expr();
        if (peek().kind != TK::var_end)
          fail(peek().line, str_cat("expected '}}', found ", describe(peek())));
        next();
        body.push_back(std::move(n));
        break;
      }
      case TK::block_begin: {
        const int line = tk.line;
        if (peek(1).kind != TK::name)
          fail(line, str_cat("expected a tag name after '{%', found ", describe(peek(1))));
        const std::string name = peek(1).text;
        for (std::string_view e : ends) {
          if (name == e) {
            next();
            next();
            found = name;
            return body;
          }
        }
        next();
        next();
        body.push_back(parse_statement(name, line));
        break;
      }
      case TK::var_end:
      case TK::block_end:
      case TK::name:
      case TK::string:
      case TK::integer:
      case TK::floating:
      case TK::op:
        fail(tk.line, str_cat("unexpected ", describe(tk)));
      }
    }
  }

  NodePtr parse_statement(const std::string& name, int line) {
    const DepthGuard guard(depth_, line);
    auto n = std::make_unique<Node>();
    n->line = line;
    if (name == "if") {
      n->kind = Node::Kind::if_;
      ExprPtr cond = parse_tuple_or_expr();
      while (true) {
        expect_block_end();
        std::string found;
        Body b = parse_body({"elif", "else", "endif"}, found);
        n->branches.emplace_back(std::move(cond), std::move(b));
        if (found == "elif") {
          cond = parse_tuple_or_expr();
          continue;
        }
        if (found == "else") {
          expect_block_end();
          Body e = parse_body({"endif"}, found);
          n->branches.emplace_back(nullptr, std::move(e));
        }
        expect_block_end();
        return n;
      }
    }
    if (name == "for") {
      n->kind = Node::Kind::for_;
      n->targets.push_back(expect_name());
      while (at_op(",")) {
        next();
        n->targets.push_back(expect_name());
      }
      if (!at_name("in"))
        fail(peek().line, str_cat("expected 'in' in a for tag, found ", describe(peek())));
      next();
      n->expr = parse_or();
      if (at_op(",")) {
        // `for x in a, b`: a tuple literal.
        auto t = make(Expr::Kind::tuple, peek().line);
        t->args.push_back(std::move(n->expr));
        while (at_op(",")) {
          next();
          t->args.push_back(parse_or());
        }
        n->expr = std::move(t);
      }
      if (at_name("if")) {
        next();
        n->cond = parse_expr();
      }
      if (at_name("recursive"))
        refuse(peek().line, "recursive for loops are not supported");
      expect_block_end();
      std::string found;
      n->body = parse_body({"else", "endfor"}, found);
      if (found == "else") {
        expect_block_end();
        n->else_body = parse_body({"endfor"}, found);
      }
      expect_block_end();
      return n;
    }
    if (name == "set") {
      const std::string target = expect_name();
      if (at_op(".")) {
        next();
        n->kind = Node::Kind::set_attr;
        n->targets = {target, expect_name()};
        expect_op("=");
        n->expr = parse_tuple_or_expr();
        expect_block_end();
        return n;
      }
      n->targets.push_back(target);
      while (at_op(",")) {
        next();
        n->targets.push_back(expect_name());
      }
      if (peek().kind == TK::block_end && n->targets.size() == 1) {
        next();
        n->kind = Node::Kind::set_block;
        std::string found;
        n->body = parse_body({"endset"}, found);
        expect_block_end();
        return n;
      }
      if (at_op("|"))
        refuse(peek().line, "filtered block set ('{% set x | filter %}') is not supported");
      n->kind = Node::Kind::set;
      expect_op("=");
      n->expr = parse_tuple_or_expr();
      expect_block_end();
      return n;
    }
    if (name == "macro") {
      n->kind = Node::Kind::macro;
      n->targets.push_back(expect_name());
      expect_op("(");
      while (!at_op(")")) {
        n->targets.push_back(expect_name());
        if (at_op("=")) {
          next();
          n->defaults.push_back(parse_expr());
        } else {
          n->defaults.push_back(nullptr);
        }
        if (!at_op(","))
          break;
        next();
      }
      expect_op(")");
      expect_block_end();
      std::string found;
      n->body = parse_body({"endmacro"}, found);
      if (peek().kind == TK::name && peek().text == n->targets[0])
        next();
      expect_block_end();
      return n;
    }
    if (name == "break" || name == "continue") {
      n->kind = name == "break" ? Node::Kind::break_ : Node::Kind::continue_;
      expect_block_end();
      return n;
    }
    static const std::set<std::string, std::less<>> known = {
        "call",  "filter", "raw",        "include", "import", "from",     "extends",
        "block", "with",   "autoescape", "do",      "trans",  "pluralize"};
    static const std::set<std::string, std::less<>> closers = {
        "elif",    "else",      "endif",  "endfor",   "endset",  "endmacro",
        "endcall", "endfilter", "endraw", "endblock", "endwith", "endautoescape"};
    if (known.count(name))
      refuse(line, str_cat("the '{% ", name, " %}' tag is not supported"));
    if (closers.count(name))
      fail(line, str_cat("unexpected '{% ", name, " %}' (no open block it could close)"));
    fail(line, str_cat("unknown tag '", name, "'"));
  }

  // --- expressions -------------------------------------------------------------------------

  // An expression, or an unparenthesized tuple of them (`{{ a, b }}`, `set x = 1, 2`).
  ExprPtr parse_tuple_or_expr() {
    ExprPtr e = parse_expr();
    if (!at_op(","))
      return e;
    auto t = make(Expr::Kind::tuple, e->line);
    t->args.push_back(std::move(e));
    while (at_op(",")) {
      next();
      t->args.push_back(parse_expr());
    }
    return t;
  }

  // Bounds the nesting of expressions and blocks (a hostile template must not overflow the stack).
  struct DepthGuard {
    int& d;
    DepthGuard(int& depth, int line) : d(depth) {
      if (++d > 200)
        refuse(line, "expressions or blocks nested more than 200 deep");
    }
    ~DepthGuard() { --d; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  ExprPtr parse_expr() {
    const DepthGuard guard(depth_, peek().line);
    ExprPtr e = parse_or();
    while (at_name("if")) {
      const int line = next().line;
      auto c = make(Expr::Kind::cond, line);
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (at_name("else")) {
        next();
        other = parse_expr();
      }
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(other));
      e = std::move(sized(c));
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      e = make2(Expr::Kind::or_, line, "or", std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      e = make2(Expr::Kind::and_, line, "and", std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    const DepthGuard guard(depth_, peek().line);
    if (at_name("not")) {
      const int line = next().line;
      auto e = make(Expr::Kind::unary, line);
      e->name = "not";
      e->args.push_back(parse_not());
      return std::move(sized(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    while (true) {
      const int line = peek().line;
      std::string op;
      if (peek().kind == TK::op &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
           peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return e;
      }
      // Chained comparisons (a < b < c) are Python's `a < b and b < c`; refuse rather than guess.
      ExprPtr rhs = parse_math1();
      if (e->kind == Expr::Kind::binary && !e->parenthesized &&
          (e->name == "==" || e->name == "!=" || e->name == "<" || e->name == "<=" ||
           e->name == ">" || e->name == ">=" || e->name == "in" || e->name == "not in"))
        refuse(line, "chained comparisons are not supported");
      e = make2(Expr::Kind::binary, line, op, std::move(e), std::move(rhs));
    }
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& tk = next();
      e = make2(Expr::Kind::binary, tk.line, tk.text, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (at_op("~")) {
      const int line = next().line;
      e = make2(Expr::Kind::binary, line, "~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& tk = next();
      e = make2(Expr::Kind::binary, tk.line, tk.text, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (at_op("**")) {
      const int line = next().line;
      e = make2(Expr::Kind::binary, line, "**", std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    const DepthGuard guard(depth_, peek().line);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& tk = next();
      e = make(Expr::Kind::unary, tk.line);
      e->name = tk.text;
      e->args.push_back(parse_unary(false));
      sized(e);
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter)
      e = parse_filters(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tk = peek();
    switch (tk.kind) {
    case TK::name: {
      next();
      auto e = make(Expr::Kind::literal, tk.line);
      if (tk.text == "true" || tk.text == "True")
        e->value = Value(Json(true));
      else if (tk.text == "false" || tk.text == "False")
        e->value = Value(Json(false));
      else if (tk.text == "none" || tk.text == "None")
        e->value = Value(Json(nullptr));
      else {
        e->kind = Expr::Kind::name;
        e->name = tk.text;
      }
      return e;
    }
    case TK::string: {
      auto e = make(Expr::Kind::literal, tk.line);
      std::string s;
      while (peek().kind == TK::string)
        s += next().text; // adjacent literals concatenate
      e->value = Value(Json(s));
      return e;
    }
    case TK::integer:
    case TK::floating: {
      next();
      auto e = make(Expr::Kind::literal, tk.line);
      if (tk.kind == TK::integer) {
        e->value = Value(Json(int_literal(tk)));
      } else {
        try {
          e->value = Value(Json(std::stod(tk.text)));
        } catch (const std::exception&) {
          refuse(tk.line, str_cat("number literal '", tk.text, "' is out of range"));
        }
      }
      return e;
    }
    case TK::op:
      if (tk.text == "(") {
        next();
        if (at_op(")")) {
          next();
          return make(Expr::Kind::tuple, tk.line);
        }
        ExprPtr e = parse_expr();
        if (at_op(",")) {
          auto t = make(Expr::Kind::tuple, tk.line);
          t->args.push_back(std::move(e));
          while (at_op(",")) {
            next();
            if (at_op(")"))
              break;
            t->args.push_back(parse_expr());
          }
          e = std::move(t);
        }
        expect_op(")");
        e->parenthesized = true;
        return e;
      }
      if (tk.text == "[") {
        next();
        auto e = make(Expr::Kind::list, tk.line);
        while (!at_op("]")) {
          e->args.push_back(parse_expr());
          if (!at_op(","))
            break;
          next();
        }
        expect_op("]");
        return e;
      }
      if (tk.text == "{") {
        next();
        auto e = make(Expr::Kind::dict, tk.line);
        while (!at_op("}")) {
          e->args.push_back(parse_expr());
          expect_op(":");
          e->args.push_back(parse_expr());
          if (!at_op(","))
            break;
          next();
        }
        expect_op("}");
        return e;
      }
      break;
    case TK::text:
    case TK::var_begin:
    case TK::var_end:
    case TK::block_begin:
    case TK::block_end:
    case TK::eof:
      break;
    }
    fail(tk.line, str_cat("expected an expression, found ", describe(tk)));
  }

  // An integer literal as int64 (Python's are unbounded: a larger one is refused).
  static std::int64_t int_literal(const Token& tk) {
    try {
      return static_cast<std::int64_t>(std::stoll(tk.text));
    } catch (const std::exception&) {
      refuse(tk.line, str_cat("integer literal '", tk.text, "' is out of range"));
    }
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!at_op(")")) {
      if (at_op("*") || at_op("**"))
        refuse(peek().line, "*args / **kwargs in a call are not supported");
      if (peek().kind == TK::name && at_op("=", 1)) {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        if (!e.kwargs.empty())
          fail(peek().line, "positional argument after a keyword argument");
        e.args.push_back(parse_expr());
      }
      if (!at_op(","))
        break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (at_op(".")) {
        const int line = next().line;
        auto a = make(Expr::Kind::attr, line);
        if (peek().kind == TK::integer) {
          a->kind = Expr::Kind::subscript;
          auto idx = make(Expr::Kind::literal, line);
          idx->value = Value(Json(int_literal(next())));
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(idx));
        } else {
          a->name = expect_name();
          a->args.push_back(std::move(e));
        }
        e = std::move(sized(a));
      } else if (at_op("[")) {
        const int line = next().line;
        ExprPtr parts[3];
        bool is_slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!at_op(":") && !at_op("]"))
            parts[k] = parse_expr();
          if (k < 2 && at_op(":")) {
            next();
            is_slice = true;
          } else {
            break;
          }
        }
        expect_op("]");
        auto s = make(is_slice ? Expr::Kind::slice : Expr::Kind::subscript, line);
        s->args.push_back(std::move(e));
        if (!is_slice && !parts[0])
          fail(line, "empty subscript '[]'");
        s->args.push_back(std::move(parts[0]));
        if (is_slice) {
          s->args.push_back(std::move(parts[1]));
          s->args.push_back(std::move(parts[2]));
        }
        e = std::move(sized(s));
      } else if (at_op("(")) {
        auto c = make(Expr::Kind::call, peek().line);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(sized(c));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (at_op("|")) {
        const int line = next().line;
        auto f = make(Expr::Kind::filter, line);
        f->name = expect_name();
        if (!is_filter(f->name))
          refuse(line, str_cat("no filter named '", f->name, "'"));
        f->args.push_back(std::move(e));
        if (at_op("("))
          parse_call_args(*f);
        e = std::move(sized(f));
      } else if (at_name("is")) {
        const int line = next().line;
        auto t = make(Expr::Kind::test, line);
        if (at_name("not")) {
          next();
          t->negated = true;
        }
        // Test names may be keywords (none, true, false, in).
        if (peek().kind != TK::name)
          fail(peek().line, str_cat("expected a test name after 'is', found ", describe(peek())));
        t->name = next().text;
        if (!is_test(t->name))
          refuse(line, str_cat("no test named '", t->name, "'"));
        t->args.push_back(std::move(e));
        if (at_op("(")) {
          parse_call_args(*t);
        } else if (peek().kind == TK::string || peek().kind == TK::integer ||
                   peek().kind == TK::floating ||
                   (peek().kind == TK::name && !at_name("and") && !at_name("or") &&
                    !at_name("if") && !at_name("else") && !at_name("is") && !at_name("in") &&
                    !at_name("not"))) {
          // A test with one argument without parentheses (`is sameas none`, `is divisibleby 3`).
          t->args.push_back(parse_primary());
        }
        e = std::move(sized(t));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

} // namespace

Template parse_template(std::string source) {
  Template t;
  Parser p(lex_template(source));
  t.body = p.parse_all();
  t.source = std::move(source);
  return t;
}

} // namespace tpullm::text::jinja
