#pragma once
/// Structural and typing checks of a module. Every failure is a DiagnosticError at the op's
/// location: every type within the TensorType limits (kMaxDim, kMaxElements), operand/result
/// counts, per-op dtype and shape rules (the op struct's infer()),
/// declared result types equal to the inferred ones, operands defined earlier in the same
/// function (single definition, use after definition), weight symbols declared with the same
/// type, and exactly one builtin.Return, last, typed as the function declares.

#include <set>
#include <string>
#include <vector>

#include "tpullm/ir/builder.hpp"

namespace tpullm::ir {

/// Checks one function; returns every diagnostic found (empty when valid).
std::vector<DiagnosticError> verify_function(const Module& m, const Function& f);

/// Checks every function of `m`; returns every diagnostic found.
std::vector<DiagnosticError> verify_module(const Module& m);

/// Verifies `m` and throws the first diagnostic (all of them joined in what()) on failure.
void verify_or_throw(const Module& m);

} // namespace tpullm::ir
