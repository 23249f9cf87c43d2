#pragma once
// The messages between the ranks of a multi-process run (private to src/runtime): a pipeline's
// hops (layer_pipeline.cpp) and a tensor-parallel run's calls (tensor_parallel.cpp) share one
// header and payload layout, and one rule from a call to the block function it runs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/runtime/layer_pipeline.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::runtime::hop {

inline constexpr std::uint32_t kMagic = 0x4c505054; // "TPPL"
// Kinds beside the BlockKinds (1..4). kHead: a tensor-parallel lm_head call ([rows, hidden]
// f32 only; `variant` the rows that count) and a rank's reply (its logits [rows, its slice]).
inline constexpr std::uint32_t kStop = 0x100, kError = 0x101, kHead = 0x102;
inline constexpr std::size_t kMaxErrorText = 2048;

/// The fixed front of every message. Calls and their replies carry [rows, hidden] f32, then
/// [rows] i32 positions and [rows] i32 KV slots; an error carries `rows` bytes of text; a stop
/// nothing.
struct Header {
  std::uint32_t magic = kMagic;
  std::uint32_t kind = 0; ///< a BlockKind, kStop, kError or kHead
  std::int64_t rows = 0;
  std::int64_t variant = 0;
  std::int64_t pos0 = 0;
  std::int32_t error_kind = 0; ///< kError: the ErrorKind
  std::int32_t error_rank = 0; ///< kError: the rank whose layers threw
};

/// Bytes after the header of a call of `rows` rows.
inline std::size_t payload_bytes(std::int64_t rows, std::int64_t hidden) {
  return static_cast<std::size_t>(rows) *
         (static_cast<std::size_t>(hidden) * sizeof(float) + 2 * sizeof(std::int32_t));
}

/// Bytes of a buffer that holds any message of calls up to `max_rows` rows.
inline std::size_t buffer_bytes(std::int64_t max_rows, std::int64_t hidden) {
  return sizeof(Header) + std::max(payload_bytes(max_rows, hidden), kMaxErrorText);
}

/// The header of a received message of `size` bytes; throws Error(io) when it is not one.
inline Header read_header(std::span<const std::byte> msg, std::size_t size, int from) {
  Header h;
  check(size >= sizeof(Header), ErrorKind::io, "pipeline", "a message of ", size,
        " bytes from rank ", from, " is shorter than its header");
  std::memcpy(&h, msg.data(), sizeof h);
  check(h.magic == kMagic, ErrorKind::io, "pipeline", "a message from rank ", from,
        " is not a pipeline message");
  return h;
}

/// The Error an error message `msg` of `size` bytes (header `h`) carries, named "<who> rank
/// <its rank>".
inline Error error_of(const Header& h, std::span<const std::byte> msg, std::size_t size,
                      const char* who) {
  const auto len = std::min<std::size_t>(
      static_cast<std::size_t>(std::max<std::int64_t>(h.rows, 0)), size - sizeof h);
  return Error(static_cast<ErrorKind>(h.error_kind), str_cat(who, " rank ", h.error_rank),
               std::string(reinterpret_cast<const char*>(msg.data() + sizeof h), len));
}

/// Throws Error(internal) unless a call of `call.rows` rows (at most `max_rows`) comes with
/// rows x `hidden` values, a position per row and no slots or a slot per row (a batched decode
/// step: a slot per row).
inline void check_call(const BlockCall& call, std::span<const float> values,
                       std::span<const std::int32_t> positions, std::span<const std::int32_t> slots,
                       std::int64_t max_rows, std::int64_t hidden, const char* who) {
  check(call.rows > 0 && call.rows <= max_rows &&
            values.size() == static_cast<std::size_t>(call.rows * hidden) &&
            positions.size() == static_cast<std::size_t>(call.rows) &&
            (slots.empty() || slots.size() == positions.size()) &&
            (call.kind != BlockKind::decode_batch || !slots.empty()),
        ErrorKind::internal, who, "a call of ", call.rows, " rows with ", values.size(),
        " hidden values, ", positions.size(), " positions and ", slots.size(), " slots");
}

/// True for the kind of a call (a BlockKind).
inline bool is_call(std::uint32_t kind) {
  return kind >= static_cast<std::uint32_t>(BlockKind::prefill) &&
         kind <= static_cast<std::uint32_t>(BlockKind::decode_batch);
}

/// Writes call `call` (hidden [rows, hidden], positions [rows], slots [rows] or empty for
/// call.slot on every row) into `buffer`; returns the message's size.
inline std::size_t write_call(std::span<std::byte> buffer, const BlockCall& call,
                              std::span<const float> hidden,
                              std::span<const std::int32_t> positions,
                              std::span<const std::int32_t> slots) {
  Header h;
  h.kind = static_cast<std::uint32_t>(call.kind);
  h.rows = call.rows;
  h.variant = call.variant;
  h.pos0 = call.pos0;
  std::byte* p = buffer.data();
  std::memcpy(p, &h, sizeof h);
  p += sizeof h;
  std::memcpy(p, hidden.data(), hidden.size_bytes());
  p += hidden.size_bytes();
  std::memcpy(p, positions.data(), positions.size_bytes());
  p += positions.size_bytes();
  if (slots.empty())
    std::fill_n(reinterpret_cast<std::int32_t*>(p), call.rows, call.slot);
  else
    std::memcpy(p, slots.data(), slots.size_bytes());
  return static_cast<std::size_t>(p - buffer.data()) +
         static_cast<std::size_t>(call.rows) * sizeof(std::int32_t);
}

/// Writes an error message (`e` from `rank`) into `buffer`; returns its size.
inline std::size_t write_error(std::span<std::byte> buffer, int rank, const Error& e) {
  const std::string text = e.what();
  const std::size_t n = std::min(text.size(), kMaxErrorText);
  Header h;
  h.kind = kError;
  h.rows = static_cast<std::int64_t>(n);
  h.error_kind = static_cast<std::int32_t>(e.kind());
  h.error_rank = rank;
  std::memcpy(buffer.data(), &h, sizeof h);
  std::memcpy(buffer.data() + sizeof h, text.data(), n);
  return sizeof h + n;
}

/// The history length S a call's block function reads: 0 for prefill, the prefill_kv
/// variant's history, the decode length for (batched) decode.
inline std::int64_t history_of(BlockKind kind, std::int64_t variant,
                               const frontend::StageParams& params) {
  return kind == BlockKind::prefill      ? 0
         : kind == BlockKind::prefill_kv ? params.prefill_kv_history(variant)
                                         : variant;
}

/// The block function of `layer` a call of `kind` / `variant` / `rows` rows runs.
inline std::string block_function(BlockKind kind, std::int64_t layer, std::int64_t variant,
                                  std::int64_t rows, const frontend::StageParams& params) {
  using N = frontend::StageNames;
  return kind == BlockKind::prefill      ? N::block(layer, variant, params)
         : kind == BlockKind::prefill_kv ? N::block_kv(layer, variant, params)
         : kind == BlockKind::decode     ? N::block_cache(layer, variant)
                                         : N::block_cache(layer, variant, rows);
}

} // namespace tpullm::runtime::hop
