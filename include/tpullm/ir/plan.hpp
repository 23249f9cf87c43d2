#pragma once
/// How and where a Tpu op runs, kept apart from what it computes: the op's plan (layer group,
/// tile slicing, core split) lives on the Operation, the storage of each value (a Buffer) on the
/// Value. The verifier checks both; the numerics ignore them. Spelled in text after an op's
/// types as `plan {group = 1, tile = {dim = rows, size = 16, count = 4}, split = {...}}` and
/// `buffers [{region = arena, offset = 0, size = 4096}]`.

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "tpullm/ir/attributes.hpp"

namespace tpullm::ir {

/// The dimension a kernel's work is divided along (tiles inside a layer group, or cores).
/// `tiles` (core splits only) deals whole tiles of a layer group to cores.
enum class SliceDim : std::uint8_t { none, rows, cols, heads, tiles };
template <>
struct EnumNames<SliceDim> {
  static constexpr std::array<std::pair<SliceDim, std::string_view>, 5> items = {
      {{SliceDim::none, "none"},
       {SliceDim::rows, "rows"},
       {SliceDim::cols, "cols"},
       {SliceDim::heads, "heads"},
       {SliceDim::tiles, "tiles"}}};
};

/// A tile slicing of one op inside its layer group: `count` tiles of `size` along `dim` (the
/// last tile may be smaller). dim = none: the op runs whole (one tile).
struct TilePlan {
  SliceDim dim = SliceDim::none; ///< rows (tokens), heads or cols (output features)
  std::int64_t size = 0;         ///< extent of one tile along dim
  std::int64_t count = 1;        ///< number of tiles
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("dim", s.dim);
    f("size", s.size);
    f("count", s.count);
  }
  friend bool operator==(const TilePlan&, const TilePlan&) = default;
};

/// A core split: `parts` workers, each taking a contiguous share of `dim`.
struct SplitPlan {
  SliceDim dim = SliceDim::none; ///< rows, cols, heads, or tiles of the group
  std::int64_t parts = 1;        ///< number of cores (1 = the calling thread)
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("dim", s.dim);
    f("parts", s.parts);
  }
  friend bool operator==(const SplitPlan&, const SplitPlan&) = default;
};

/// The plan of one Tpu op: its layer group (-1 = none), its slicing inside the group, its core
/// split, and the group's per-core local memory (the same on every member of a group).
struct OpPlan {
  std::int64_t group = -1; ///< layer group id, numbered in program order; -1 = ungrouped
  TilePlan tile;           ///< tile slicing inside the group
  SplitPlan split;         ///< core split of the op (or of the group's tiles)
  std::int64_t local = 0;  ///< bytes of per-core local memory the group's tiles use
  template <class S, class F>
  static void fields(S& s, F&& f) {
    f("group", s.group);
    f("tile", s.tile);
    f("split", s.split);
    f("local", s.local);
  }
  friend bool operator==(const OpPlan&, const OpPlan&) = default;
};

} // namespace tpullm::ir
