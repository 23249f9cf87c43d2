#pragma once
// A Catch matcher on the kind of a tpullm::Error, for the tests of code that classifies its
// errors where it raises them:
//   CHECK_THROWS_MATCHES(expr, tpullm::Error, tpullm_test::kind_is(tpullm::ErrorKind::internal));
//   CHECK_THROWS_KIND(expr, internal);   // the same
// fails when expr throws nothing, something that is not a tpullm::Error, or an Error of another
// kind.

#include <catch2/catch.hpp>

#include <string>

#include "tpullm/support/error.hpp"

namespace tpullm_test {

/// Matches a tpullm::Error whose kind() is `kind`.
class ErrorKindIs : public Catch::MatcherBase<tpullm::Error> {
public:
  /// The kind to match.
  explicit ErrorKindIs(tpullm::ErrorKind kind) : kind_(kind) {}
  /// True when e.kind() is the expected kind.
  bool match(const tpullm::Error& e) const override { return e.kind() == kind_; }
  /// "is an Error of kind <kind>".
  std::string describe() const override {
    return "is an Error of kind '" + std::string(tpullm::to_string(kind_)) + "'";
  }

private:
  tpullm::ErrorKind kind_;
};

/// The matcher for an Error of `kind`.
inline ErrorKindIs kind_is(tpullm::ErrorKind kind) {
  return ErrorKindIs(kind);
}

} // namespace tpullm_test

/// CHECK that `expr` throws a tpullm::Error of ErrorKind::`kind` (invalid_input, unsupported, io,
/// internal).
#define CHECK_THROWS_KIND(expr, kind)                                                              \
  CHECK_THROWS_MATCHES(expr, tpullm::Error, tpullm_test::kind_is(tpullm::ErrorKind::kind))
