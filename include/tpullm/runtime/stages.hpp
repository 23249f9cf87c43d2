#pragma once
/// Stages: what the generation loop (Session) needs from a back end, the stage functions of one
/// model run by name over byte spans. Two back ends: CompiledStages (Programs on an Executor's KV
/// slot, runtime/compiled_stages.hpp) and InterpretedStages (Top modules on the reference
/// interpreter, runtime/interpreted_stages.hpp). Inputs are read where the caller keeps them and
/// outputs written into the caller's spans, so the loop never copies activations, token ids,
/// positions or KV history.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpullm/support/error.hpp"

namespace tpullm::runtime {

/// Read-only bytes of one argument (row-major; f32 activations, i32 ids / positions).
using ConstBytes = std::span<const std::byte>;
/// Writable bytes of one result.
using MutBytes = std::span<std::byte>;

/// The bytes of n elements of T at p, read-only (a stage argument).
template <class T>
ConstBytes cbytes(const T* p, std::int64_t n) {
  return std::as_bytes(std::span<const T>(p, static_cast<std::size_t>(n)));
}
/// The bytes of n elements of T at p, writable (a stage result).
template <class T>
MutBytes mbytes(T* p, std::int64_t n) {
  return std::as_writable_bytes(std::span<T>(p, static_cast<std::size_t>(n)));
}

/// Bytes of a typed span.
template <class T>
ConstBytes as_bytes(std::span<const T> s) {
  return std::as_bytes(s);
}
/// Writable bytes of a typed span.
template <class T>
MutBytes as_writable_bytes(std::span<T> s) {
  return std::as_writable_bytes(s);
}

/// A stage function resolved once (Stages::resolve): valid while its Stages lives.
struct StageHandle {
  std::int64_t id = -1; ///< the back end's index (-1: none)
};

/// Runs compiled or interpreted stage functions by name, or by a handle resolved once.
class Stages {
public:
  virtual ~Stages() = default;
  /// Resolves function `name` once, so a per-token loop runs handles without building or
  /// looking up names. The default keeps the name and runs it by name. Throws Error when
  /// the back end has no such function.
  virtual StageHandle resolve(const std::string& name) {
    check(has_function(name), ErrorKind::invalid_input, "@" + name, "no such stage function");
    names_.push_back(name);
    return {static_cast<std::int64_t>(names_.size()) - 1};
  }
  /// run() of a resolved function.
  virtual void run(StageHandle h, std::span<const ConstBytes> inputs,
                   std::span<const MutBytes> outputs) {
    check(h.id >= 0 && h.id < static_cast<std::int64_t>(names_.size()), ErrorKind::internal,
          "stages", "unknown handle ", h.id);
    run(names_[static_cast<std::size_t>(h.id)], inputs, outputs);
  }
  /// run() of a resolved function on the KV slots `slots` of a back end that keeps several
  /// conversations' caches (one slot for every row, or one per row of a batched function:
  /// Executor::run). The default throws Error(unsupported).
  virtual void run_on(StageHandle /*h*/, std::span<const ConstBytes> /*inputs*/,
                      std::span<const MutBytes> /*outputs*/,
                      std::span<const std::int32_t> /*slots*/) {
    throw Error(ErrorKind::unsupported, "stages", "this back end keeps one conversation's cache");
  }
  /// Runs function `name`. inputs[i]: the bytes of argument i (exactly its size; a history
  /// argument is empty when owns_kv_cache()). outputs[j]: where result j goes (exactly its
  /// size), or empty when the caller does not need it.
  virtual void run(const std::string& name, std::span<const ConstBytes> inputs,
                   std::span<const MutBytes> outputs) = 0;
  /// True when function `name` exists.
  virtual bool has_function(const std::string& name) const = 0;
  /// True when the back end keeps the KV cache itself: the loop then passes no history and
  /// asks for no keys / values (the stage functions update the cache in place).
  virtual bool owns_kv_cache() const { return false; }
  /// Whether a conversation may be rolled back to keep positions [0, keep) when its caches were
  /// written up to (not including) `written`: false only where a sliding-window layer's cache
  /// is a ring that has overwritten keys a query at `keep` sees (memory/kv_rings.hpp).
  virtual bool kv_keeps(std::int64_t /*written*/, std::int64_t /*keep*/) const { return true; }

private:
  std::vector<std::string> names_; ///< what the default resolve() handed out
};

} // namespace tpullm::runtime
