#pragma once
/// Rewrite patterns, MLIR style: a Pattern has a name, a benefit (higher is tried first) and an
/// optional root op kind; match_and_rewrite(op, rewriter) either changes the IR through the
/// rewriter and returns true, or leaves the IR untouched and returns false (the greedy driver
/// checks this contract). OpPattern<T> narrows the root to one op struct.

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tpullm/rewrite/rewriter.hpp"

namespace tpullm::rewrite {

/// One local rewrite rule.
class Pattern {
public:
  /// `name` for reports, `benefit` >= 0 (higher is tried first), `root` = the only op kind it
  /// matches (nullopt: any op).
  explicit Pattern(std::string name, int benefit = 1, std::optional<ir::OpKind> root = std::nullopt)
      : name_(std::move(name)), benefit_(benefit), root_(root) {}
  virtual ~Pattern() = default;
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  const std::string& name() const { return name_; }
  int benefit() const { return benefit_; }
  std::optional<ir::OpKind> root_kind() const { return root_; }

  /// Tries to rewrite `op` (the insertion point is set right before it). Returns true iff the IR
  /// was changed, and then only through `rewriter`.
  virtual bool match_and_rewrite(ir::Operation* op, Rewriter& rewriter) const = 0;

private:
  std::string name_;
  int benefit_;
  std::optional<ir::OpKind> root_;
};

/// A pattern rooted at op struct T: implement rewrite_op(op, attrs, rewriter).
template <class T>
class OpPattern : public Pattern {
public:
  explicit OpPattern(std::string name, int benefit = 1)
      : Pattern(std::move(name), benefit, ir::kind_of<T>()) {}

  bool match_and_rewrite(ir::Operation* op, Rewriter& rewriter) const final {
    const T* attrs = op->as<T>();
    return attrs && rewrite_op(op, *attrs, rewriter);
  }
  /// `attrs` is `op`'s own struct (read-only: change it through Rewriter::modify_attrs).
  virtual bool rewrite_op(ir::Operation* op, const T& attrs, Rewriter& rewriter) const = 0;
};

/// An owning, ordered collection of patterns.
class PatternSet {
public:
  PatternSet() = default;
  PatternSet(PatternSet&&) = default;
  PatternSet& operator=(PatternSet&&) = default;

  /// Adds a pattern constructed from `args`.
  template <class P, class... A>
  PatternSet& add(A&&... args) {
    return add(std::make_unique<P>(std::forward<A>(args)...));
  }
  PatternSet& add(std::unique_ptr<Pattern> p) {
    patterns_.push_back(std::move(p));
    return *this;
  }
  /// Moves all patterns of `other` into this set.
  PatternSet& add(PatternSet&& other);

  const std::vector<std::unique_ptr<Pattern>>& patterns() const { return patterns_; }
  std::size_t size() const { return patterns_.size(); }

  /// Patterns that may match an op of kind `k` (rooted at k, or at any op), highest benefit
  /// first; equal benefits keep insertion order.
  std::vector<const Pattern*> for_kind(ir::OpKind k) const;

private:
  std::vector<std::unique_ptr<Pattern>> patterns_;
};

} // namespace tpullm::rewrite
