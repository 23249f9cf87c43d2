#pragma once
/// The project's error vocabulary: one exception hierarchy rooted at `tpullm::Error`, carrying a
/// kind and an optional "where" (a file path, a tensor name, an op) that is part of what().
///   what() == "<kind>: <where>: <message>"   (or "<kind>: <message>" when where is empty)
/// Throw with `throw_error(kind, where, pieces...)`; the pieces are streamed together.
/// Every library error derives from Error: DiagnosticError (IR text and verifier, with a source
/// location), pass::PassFailure, pass::PipelineError, pass::OptionError and ModelValueError
/// (below; the kernels throw Error too, kind decided where they raise it). The tools catch
/// Error once; anything else reaching them is a bug reported as an internal error, except
/// std::bad_alloc (out of memory).

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tpullm {

/// What went wrong, coarsely: bad data from the outside, a valid but unsupported feature,
/// an operating-system I/O failure, or a broken internal invariant (a bug).
enum class ErrorKind { invalid_input, unsupported, io, internal };

/// Human-readable name of an ErrorKind ("invalid input", "unsupported", "I/O error", ...).
inline constexpr std::string_view to_string(ErrorKind k) noexcept {
  switch (k) {
  case ErrorKind::invalid_input:
    return "invalid input";
  case ErrorKind::unsupported:
    return "unsupported";
  case ErrorKind::io:
    return "I/O error";
  case ErrorKind::internal:
    return "internal error";
  }
  return "error";
}

/// Streams every argument into one string (`str_cat("tensor '", name, "' has ", n, " dims")`).
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

/// The exception thrown by every tpullm component. Cheap to copy; what() is precomputed.
class Error : public std::runtime_error {
public:
  /// kind: category; where: file path / tensor name / op (may be empty); message: what failed.
  Error(ErrorKind kind, std::string where, std::string message)
      : std::runtime_error(compose(kind, where, message)), kind_(kind), where_(std::move(where)),
        message_(std::move(message)) {}

  /// Category of the failure.
  ErrorKind kind() const noexcept { return kind_; }
  /// Location of the failure (file path, tensor name, ...); empty when unknown.
  const std::string& where() const noexcept { return where_; }
  /// The message without kind and where.
  const std::string& message() const noexcept { return message_; }

  /// The same error with an outer location prepended: "outer: where".
  Error within(std::string_view outer) const;

protected:
  /// For subclasses that format what() themselves (e.g. "file:line:col: message").
  Error(ErrorKind kind, std::string where, std::string message, const std::string& what)
      : std::runtime_error(what), kind_(kind), where_(std::move(where)),
        message_(std::move(message)) {}

private:
  static std::string compose(ErrorKind kind, const std::string& where, const std::string& msg);

  ErrorKind kind_;
  std::string where_;
  std::string message_;
};

/// A failure of the model's own values during a run (a non-finite MoE router logit,
/// kernels/moe.hpp): the checkpoint's doing, not the plan's or a bug. Error(invalid_input); the
/// kernel throws it with an empty where, the executor adds the instruction (its function names
/// the layer) and keeps the type, so `tpullm compile` can name the model as what failed.
class ModelValueError : public Error {
public:
  /// `where`: the instruction ("@block_1: tpu.MoE at ...") or empty; `message`: what is wrong.
  ModelValueError(std::string where, std::string message)
      : Error(ErrorKind::invalid_input, std::move(where), std::move(message)) {}

  /// The same error, still a ModelValueError, with an outer location prepended.
  ModelValueError within(std::string_view outer) const {
    const Error e = Error::within(outer);
    return ModelValueError(e.where(), e.message());
  }
};

/// Throws Error(kind, where, str_cat(pieces...)).
template <class... Args>
[[noreturn]] void throw_error(ErrorKind kind, std::string where, const Args&... pieces) {
  throw Error(kind, std::move(where), str_cat(pieces...));
}

/// Throws Error(kind, where, str_cat(pieces...)) unless `cond` holds.
/// The pieces are only formatted on failure.
template <class... Args>
void check(bool cond, ErrorKind kind, std::string_view where, const Args&... pieces) {
  if (!cond) [[unlikely]]
    throw Error(kind, std::string(where), str_cat(pieces...));
}

} // namespace tpullm
