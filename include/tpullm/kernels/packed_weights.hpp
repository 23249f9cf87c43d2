#pragma once
/// Packed weight layouts the compiler repacks linear-layer weights into, for kernels/matmul.hpp
/// and kernels/mlp.hpp.
///
/// A logical weight is W: [K, N] (y[M, N] = x[M, K] · W). Every format uses the same outer
/// layout: N is cut into *panels* of `kPanelCols` = 32 columns (the last panel is zero-padded),
/// and each panel stores its K rows one after the other ("N-blocked panels, K-contiguous"):
///
///   data    = panel 0 | panel 1 | ... | panel P-1        P = ceil(N / 32)
///   panel p = row 0 | row 1 | ... | row Kp-1             row = the 32 columns [32p, 32p+32) at k
///
/// A row occupies `row_bytes(format)` bytes on average:
///   - f32  : 128 B, 32 little-endian IEEE f32, column order 0..31.
///   - f16  :  64 B, 32 IEEE binary16, column order 0..31.
///   - bf16 :  64 B, 32 bfloat16 in column order 0,16,1,17,...,15,31: the 32-bit word j (bytes
///             4j..4j+3) holds column j in its low half and column j+16 in its high half, so a
///             shift / mask of 16 dwords yields columns 0..15 / 16..31 as f32.
///   - int8 :  32 B. Rows are stored in *quads* of 4 (K is padded with zero rows to Kp, a
///             multiple of 4): quad t (rows 4t..4t+3) is 128 B whose 32-bit word c (bytes
///             4c..4c+3) holds column c, byte j = q[4t + j][c] (two's complement). This is the
///             operand layout of VPDPBUSD (4 consecutive k per dword lane).
///   - int8_asym / int8_min: 32 B, the int8 quads holding unsigned codes u in [0, 255] (no
///             sign flip).
///   - int4_sym / int4_asym / int4_min: 16 B. Rows are stored in *octets* of 8 (K padded to
///             Kp, a multiple of 8): octet t (rows 8t..8t+7) is 128 B whose word c holds column c,
///             byte j = u[8t + j][c] | u[8t + 4 + j][c] << 4 (unsigned nibbles u in [0, 15]), so
///             `word & 0x0F0F0F0F` gives rows 8t..8t+3 and `(word >> 4) & 0x0F0F0F0F` rows
///             8t+4..8t+7 as VPDPBUSD operands.
///   - int6_sym / int6_min: 24 B. Rows are stored in *blocks* of 16 (K padded to Kp, a
///             multiple of 16) of 384 B: bytes [0, 256) are the low nibbles of the 6-bit codes u in
///             [0, 63] as two int4 octets (rows 0..7, then rows 8..15, laid out as above); bytes
///             [256, 384) the high two bits: word c holds column c, byte j (0..3) = h[j] | h[4 + j]
///             << 2 | h[8 + j] << 4 | h[12 + j] << 6 with h[i] = u[16t + i][c] >> 4. Quad q (rows
///             4q..4q+3) is then `(octet word >> 4 (q odd)) & 0x0F0F0F0F | ((high word >> 2q) &
///             0x03030303) << 4`: a VPDPBUSD operand in a shift and two masks.
/// Padded rows are zero; kernels pad x with zeros to match (stored rows = Kp = `stored_rows()`).
///
/// Quantized formats carry per-group parameters. Groups are `group_size` consecutive rows along
/// K (group g = rows [g*group_size, (g+1)*group_size)); group_size == K is per-output-channel
/// (its single group also covers the padding rows). Otherwise group_size must be a multiple of the
/// row group (4 for int8, 8 for int4, 16 for int6) so groups start on quad / octet / block
/// boundaries.
///   scales = [P][G][32] f32          (G = K / group_size; padded columns hold 0)
///   zeros  = [P][G][32] uint8 in [0,15] (int4_asym) or [0,255] (int8_asym); empty otherwise
///   mins   = [P][G][32] f32          (int4_min, int8_min, int6_min; padded columns hold 0); empty
///            otherwise
/// and dequantize as
///   int8      : w[k][n] = q * scale[g][n]
///   int8_asym : w[k][n] = (u - zero[g][n]) * scale[g][n]
///   int4_sym  : w[k][n] = (u - 8) * scale[g][n]
///   int4_asym : w[k][n] = (u - zero[g][n]) * scale[g][n]
///   int6_sym  : w[k][n] = (u - 32) * scale[g][n]                 (ggml's Q6_K codes as stored)
///   int4_min / int8_min / int6_min : w[k][n] = u * scale[g][n] - min[g][n]   ("scale and min":
///               ggml's Q4_1 / Q5_1 / K-quants, whose min is an arbitrary f32, not code * scale)
/// with g = k / group_size.
///
/// *Two-level scales* (ggml's K-quants: a small integer scale per group under an f16 per 256
/// rows), `super_rows` > 0: then `scales` (and `mins`) hold one f32 per *super-block* of
/// super_rows rows, [P][K / super_rows][32], and every group has an int8 code per column,
///   scale_codes = [P][G][32] int8, min_codes = [P][G][32] int8 (scale-and-min formats only)
/// with scale[g][n] = scales[g * group_size / super_rows][n] * scale_codes[g][n] (min likewise),
/// the f32 product each kernel forms in its group epilogue (scale_of / min_of). The numbers are
/// those of the one-level form bit for bit (with_two_level_scales checks it); what changes is the
/// bytes: Q4_K's 4.75 bits a weight instead of 6, Q6_K's 6.6 instead of 8.
///
/// Per panel, weights, scales and zeros / mins are each one contiguous
/// run, so a GEMV streams three arrays front to back; the GEMM path decodes a [kc, 32] block of
/// one panel into an f32 tile in L1 and reuses it for every row of x. The enumerators' order is
/// part of no file format (bundles name formats by IR type), but new ones go at the end.
///
/// Act-order checkpoints (GPTQ desc_act: row k uses group g_idx[k]) are packed with their rows
/// sorted by group; `k_perm[j]` is then the original row stored at packed row j, and the kernels
/// read x[:, k_perm[j]] for it. `k_perm` is empty when rows are in natural order.
///
/// The pack_* functions and permute_columns take a checkpoint's data (shapes, group sizes, codes,
/// zero points, act-order permutations): what they refuse throws Error(invalid_input). An
/// allocation that fails throws std::bad_alloc, the standard library's out-of-memory signal
/// (the tools report it as "out of memory").

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <sys/mman.h>

#include "tpullm/support/float16.hpp"
#include "tpullm/support/error.hpp"

namespace tpullm::kernels {

/// Columns per panel of every packed format.
inline constexpr std::int64_t kPanelCols = 32;

/// Storage format of a packed weight matrix (see the file comment for the byte layouts).
enum class WeightFormat : std::uint8_t {
  f32,       ///< 32 x f32 per row
  bf16,      ///< 32 x bf16 per row, columns interleaved 0,16,1,17,...
  f16,       ///< 32 x f16 per row
  int8,      ///< signed codes in quads, w = q * scale
  int4_sym,  ///< nibbles in octets, w = (u - 8) * scale
  int4_asym, ///< nibbles in octets, w = (u - zero) * scale
  int8_asym, ///< unsigned codes in quads, w = (u - zero) * scale
  int4_min,  ///< nibbles in octets, w = u * scale - min (scale and min)
  int8_min,  ///< unsigned codes in quads, w = u * scale - min (scale and min)
  int6_sym,  ///< 6-bit codes in 16-row blocks (nibble octets + 2-bit plane), w = (u - 32) * scale
  int6_min,  ///< int6_sym's blocks, w = u * scale - min (scale and min)
};

/// Printable name ("f32", "bf16", "f16", "int8", "int4_sym", "int4_asym", "int8_asym",
/// "int4_min", "int8_min", "int6_sym", "int6_min").
constexpr std::string_view format_name(WeightFormat f) {
  switch (f) {
  case WeightFormat::f32:
    return "f32";
  case WeightFormat::bf16:
    return "bf16";
  case WeightFormat::f16:
    return "f16";
  case WeightFormat::int8:
    return "int8";
  case WeightFormat::int4_sym:
    return "int4_sym";
  case WeightFormat::int4_asym:
    return "int4_asym";
  case WeightFormat::int8_asym:
    return "int8_asym";
  case WeightFormat::int4_min:
    return "int4_min";
  case WeightFormat::int8_min:
    return "int8_min";
  case WeightFormat::int6_sym:
    return "int6_sym";
  case WeightFormat::int6_min:
    return "int6_min";
  }
  return "?";
}

/// Bytes of one packed row (32 columns at one k) of format `f`.
constexpr std::int64_t row_bytes(WeightFormat f) {
  switch (f) {
  case WeightFormat::f32:
    return 128;
  case WeightFormat::bf16:
  case WeightFormat::f16:
    return 64;
  case WeightFormat::int8:
  case WeightFormat::int8_asym:
  case WeightFormat::int8_min:
    return 32;
  case WeightFormat::int4_sym:
  case WeightFormat::int4_asym:
  case WeightFormat::int4_min:
    return 16;
  case WeightFormat::int6_sym:
  case WeightFormat::int6_min:
    return 24;
  }
  return 0;
}

/// Rows stored together (1 for float formats, 4 for int8 quads, 8 for int4 octets, 16 for int6
/// blocks).
constexpr std::int64_t row_group(WeightFormat f) {
  switch (f) {
  case WeightFormat::f32:
  case WeightFormat::bf16:
  case WeightFormat::f16:
    return 1;
  case WeightFormat::int8:
  case WeightFormat::int8_asym:
  case WeightFormat::int8_min:
    return 4;
  case WeightFormat::int4_sym:
  case WeightFormat::int4_asym:
  case WeightFormat::int4_min:
    return 8;
  case WeightFormat::int6_sym:
  case WeightFormat::int6_min:
    return 16;
  }
  return 1;
}

/// True for the formats that carry scales (int8, int4_sym, int4_asym, int8_asym, int4_min,
/// int8_min, int6_sym, int6_min).
constexpr bool is_quantized(WeightFormat f) {
  switch (f) {
  case WeightFormat::f32:
  case WeightFormat::bf16:
  case WeightFormat::f16:
    return false;
  case WeightFormat::int8:
  case WeightFormat::int4_sym:
  case WeightFormat::int4_asym:
  case WeightFormat::int8_asym:
  case WeightFormat::int4_min:
  case WeightFormat::int8_min:
  case WeightFormat::int6_sym:
  case WeightFormat::int6_min:
    return true;
  }
  return false;
}

/// True for the formats with per-group zero points (int4_asym, int8_asym).
constexpr bool has_zeros(WeightFormat f) {
  return f == WeightFormat::int4_asym || f == WeightFormat::int8_asym;
}

/// True for the "scale and min" formats with per-group f32 mins (int4_min, int8_min, int6_min).
constexpr bool has_mins(WeightFormat f) {
  return f == WeightFormat::int4_min || f == WeightFormat::int8_min || f == WeightFormat::int6_min;
}

/// True for the 8-bit formats stored in quads (int8, int8_asym, int8_min).
constexpr bool is_byte_format(WeightFormat f) {
  return f == WeightFormat::int8 || f == WeightFormat::int8_asym || f == WeightFormat::int8_min;
}

/// True for the 4-bit formats stored in octets (int4_sym, int4_asym, int4_min).
constexpr bool is_nibble_format(WeightFormat f) {
  return f == WeightFormat::int4_sym || f == WeightFormat::int4_asym || f == WeightFormat::int4_min;
}

/// True for the 6-bit formats stored in 16-row blocks (int6_sym, int6_min).
constexpr bool is_six_format(WeightFormat f) {
  return f == WeightFormat::int6_sym || f == WeightFormat::int6_min;
}

/// True when `super_rows` is 0 (one f32 scale per group) or a super-block two-level scales can
/// use for format f, [K, *], `group` rows per group: a multiple of the group (which must be
/// positive and less than K: a per-channel weight has no two-level form) dividing K, in a format
/// with scales and without zero points.
constexpr bool super_rows_fit(WeightFormat f, std::int64_t K, std::int64_t group,
                              std::int64_t super_rows) {
  if (super_rows == 0)
    return true;
  return super_rows > 0 && is_quantized(f) && !has_zeros(f) && group > 0 && group < K &&
         super_rows % group == 0 && K % super_rows == 0;
}

/// The zero point a format's unsigned codes carry when it has no per-group zeros: 8 for int4_sym,
/// 32 for int6_sym, 0 otherwise.
constexpr int fixed_zero(WeightFormat f) {
  return f == WeightFormat::int4_sym ? 8 : f == WeightFormat::int6_sym ? 32 : 0;
}

/// 64-byte aligned, zero-initialised, move-only array of trivially copyable T; or, made by
/// borrow(), a non-owning view of memory someone else keeps alive (e.g. an mmap'ed bundle).
/// From kLazyZeroBytes on, the memory is an anonymous mapping: zero pages the system commits on
/// first touch, so a KV cache or arena costs resident memory only where it is used (a pipeline
/// rank touches only its own layers' caches).
template <class T>
class AlignedArray {
public:
  AlignedArray() = default;
  /// A view of n elements at p, not freed by this array (p must outlive it).
  static AlignedArray borrow(const T* p, std::size_t n) {
    AlignedArray a;
    a.p_ = std::unique_ptr<T, Free>(const_cast<T*>(p), Free{false, 0});
    a.n_ = n;
    return a;
  }
  /// True when this array owns its memory.
  bool owns() const { return p_.get_deleter().owned; }
  /// n zero-initialised elements.
  explicit AlignedArray(std::size_t n) : n_(n) {
    if (n) {
      const std::size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      if (bytes >= kLazyZeroBytes) {
        void* m =
            ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) // out of memory: std::bad_alloc as from `new`
          throw std::bad_alloc();
        p_ = std::unique_ptr<T, Free>(static_cast<T*>(m), Free{true, bytes});
        return;
      }
      p_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
      if (!p_) // out of memory: std::bad_alloc as from `new` (not a kind of tpullm::Error)
        throw std::bad_alloc();
      std::memset(static_cast<void*>(p_.get()), 0, bytes);
    }
  }
  /// Arrays of at least this many bytes are mapped, zero and committed page by page on use.
  static constexpr std::size_t kLazyZeroBytes = std::size_t{1} << 20;
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](std::size_t i) { return p_.get()[i]; }
  const T& operator[](std::size_t i) const { return p_.get()[i]; }
  std::span<T> span() { return {data(), n_}; }
  std::span<const T> span() const { return {data(), n_}; }

private:
  struct Free {
    bool owned = true;
    std::size_t mapped = 0; ///< bytes of an anonymous mapping (munmap), 0: aligned_alloc (free)
    void operator()(T* p) const {
      if (!owned)
        return;
      if (mapped)
        ::munmap(static_cast<void*>(p), mapped);
      else
        std::free(p);
    }
  };
  std::unique_ptr<T, Free> p_;
  std::size_t n_ = 0;
};

/// A weight W: [K, N] in one of the packed formats above.
struct PackedWeights {
  WeightFormat format = WeightFormat::f32; ///< storage format
  std::int64_t K = 0;                      ///< rows (input features)
  std::int64_t N = 0;                      ///< columns (output features)
  std::int64_t group_size = 0;             ///< rows per scale group; K for per-channel / floats
  AlignedArray<std::uint8_t> data;         ///< [P][Kp][row_bytes] panels (see file comment)
  AlignedArray<float> scales;              ///< [P][scale_rows()][32] (quantized), else empty
  AlignedArray<std::uint8_t> zeros;        ///< [P][G][32] (int4_asym, int8_asym), else empty
  AlignedArray<float> mins;                ///< [P][scale_rows()][32] (has_mins), else empty
  std::vector<std::int32_t> k_perm;        ///< [K] original row of packed row j, or empty
  /// Two-level scales: rows per super-block (a multiple of group_size dividing K), else 0. Then
  /// `scales` / `mins` are [P][K / super_rows][32] and the codes below hold each group's factor.
  std::int64_t super_rows = 0;
  AlignedArray<std::int8_t> scale_codes; ///< [P][G][32] (two-level scales), else empty
  AlignedArray<std::int8_t> min_codes;   ///< [P][G][32] (two-level scale and min), else empty

  /// True when the scales are stored in two levels (super_rows > 0).
  bool two_level() const { return super_rows > 0; }
  /// Number of f32 scale rows per panel: K / super_rows (two-level) or groups().
  std::int64_t scale_rows() const { return two_level() ? K / super_rows : groups(); }
  /// Scale of group g, column c (0..31) of panel p: the stored f32, or super * code (two-level).
  float scale_of(std::int64_t p, std::int64_t g, std::int64_t c) const {
    return param_of(scales, scale_codes, p, g, c);
  }
  /// Min of group g, column c of panel p (scale-and-min formats), as scale_of.
  float min_of(std::int64_t p, std::int64_t g, std::int64_t c) const {
    return param_of(mins, min_codes, p, g, c);
  }
  /// Group g's parameter of column c of panel p from `f32` (and `codes` when two-level).
  float param_of(const AlignedArray<float>& f32, const AlignedArray<std::int8_t>& codes,
                 std::int64_t p, std::int64_t g, std::int64_t c) const {
    const auto at = static_cast<std::size_t>((p * groups() + g) * kPanelCols + c);
    if (!two_level())
      return f32[at];
    const std::int64_t s = g * group_size / super_rows;
    return f32[static_cast<std::size_t>((p * scale_rows() + s) * kPanelCols + c)] *
           static_cast<float>(codes[at]);
  }

  /// Rows actually stored per panel: K rounded up to the format's row group.
  std::int64_t stored_rows() const {
    return (K + row_group(format) - 1) / row_group(format) * row_group(format);
  }
  /// Rows covered by one scale group in storage (group_size, or stored_rows() if per-channel).
  std::int64_t group_rows() const { return group_size == K ? stored_rows() : group_size; }
  /// Number of 32-column panels, ceil(N / 32).
  std::int64_t panels() const { return (N + kPanelCols - 1) / kPanelCols; }
  /// Number of groups along K (1 for float formats).
  std::int64_t groups() const { return group_size > 0 ? K / group_size : 1; }
  /// Bytes of one panel's weight rows.
  std::int64_t panel_bytes() const { return stored_rows() * row_bytes(format); }
  /// Bytes a kernel reads for the whole matrix: weights + scales + zeros + mins (+ codes).
  std::int64_t total_bytes() const {
    return static_cast<std::int64_t>(data.size() + scales.size() * sizeof(float) + zeros.size() +
                                     mins.size() * sizeof(float) + scale_codes.size() +
                                     min_codes.size());
  }
};

namespace detail {

inline void check_pack_shape(std::string_view what, std::int64_t K, std::int64_t N,
                             std::size_t have, std::size_t want_elems) {
  if (K <= 0 || N <= 0)
    throw_error(ErrorKind::invalid_input, "",
                std::string(what) + ": K and N must be positive, got K=" + std::to_string(K) +
                    " N=" + std::to_string(N));
  if (have != want_elems)
    throw_error(ErrorKind::invalid_input, "",
                std::string(what) + ": expected " + std::to_string(want_elems) +
                    " elements for [K=" + std::to_string(K) + ", N=" + std::to_string(N) +
                    "], got " + std::to_string(have));
}

inline std::int64_t check_group(std::string_view what, std::int64_t K, std::int64_t group,
                                std::int64_t rg) {
  if (group <= 0 || K % group != 0)
    throw_error(ErrorKind::invalid_input, "",
                std::string(what) + ": K=" + std::to_string(K) +
                    " is not a multiple of group_size=" + std::to_string(group));
  if (group != K && group % rg != 0)
    throw_error(ErrorKind::invalid_input, "",
                std::string(what) + ": group_size=" + std::to_string(group) +
                    " must be a multiple of " + std::to_string(rg) +
                    " (or equal K for per-channel scales)");
  return K / group;
}

/// A zeroed PackedWeights of format f, [K, N], `group` rows per group and `super_rows` (0: one
/// f32 scale per group; else two-level, which the caller has checked with super_rows_fit).
inline PackedWeights make_packed(WeightFormat f, std::int64_t K, std::int64_t N, std::int64_t group,
                                 std::int64_t super_rows = 0) {
  PackedWeights w;
  w.format = f;
  w.K = K;
  w.N = N;
  w.group_size = group;
  w.super_rows = super_rows;
  const auto per_group = static_cast<std::size_t>(w.panels() * w.groups() * kPanelCols);
  const auto per_scale_row = static_cast<std::size_t>(w.panels() * w.scale_rows() * kPanelCols);
  w.data = AlignedArray<std::uint8_t>(static_cast<std::size_t>(w.panels() * w.panel_bytes()));
  if (is_quantized(f))
    w.scales = AlignedArray<float>(per_scale_row);
  if (has_zeros(f))
    w.zeros = AlignedArray<std::uint8_t>(per_group);
  if (has_mins(f))
    w.mins = AlignedArray<float>(per_scale_row);
  if (w.two_level()) {
    w.scale_codes = AlignedArray<std::int8_t>(per_group);
    if (has_mins(f))
      w.min_codes = AlignedArray<std::int8_t>(per_group);
  }
  return w;
}

/// A copy of w that owns all its arrays.
inline PackedWeights copy_packed(const PackedWeights& w) {
  PackedWeights out = make_packed(w.format, w.K, w.N, w.group_size, w.super_rows);
  auto copy = [](auto& to, const auto& from) {
    if (!from.empty())
      std::memcpy(to.data(), from.data(), from.size() * sizeof(from[0]));
  };
  copy(out.data, w.data);
  copy(out.scales, w.scales);
  copy(out.zeros, w.zeros);
  copy(out.mins, w.mins);
  copy(out.scale_codes, w.scale_codes);
  copy(out.min_codes, w.min_codes);
  out.k_perm = w.k_perm;
  return out;
}

/// Byte offset of (k, n) inside `data` (for int4: the byte holding the nibble, see nibble_high;
/// for int6: the byte holding the low nibble, see set_code6).
inline std::int64_t elem_offset(WeightFormat f, std::int64_t Kp, std::int64_t k, std::int64_t n) {
  const std::int64_t p = n / kPanelCols, c = n % kPanelCols;
  const std::int64_t rg = row_group(f);
  const std::int64_t base = (p * Kp + k / rg * rg) * row_bytes(f); // start of the row group
  switch (f) {
  case WeightFormat::f32:
    return base + 4 * c;
  case WeightFormat::f16:
    return base + 2 * c;
  case WeightFormat::bf16:
    return base + (c < 16 ? 4 * c : 4 * (c - 16) + 2);
  case WeightFormat::int8:
  case WeightFormat::int8_asym:
  case WeightFormat::int8_min:
    return base + 4 * c + k % 4;
  case WeightFormat::int4_sym:
  case WeightFormat::int4_asym:
  case WeightFormat::int4_min:
    return base + 4 * c + (k % 8) % 4;
  case WeightFormat::int6_sym:
  case WeightFormat::int6_min:
    return base + 128 * ((k % 16) / 8) + 4 * c + k % 4;
  }
  return 0;
}

/// For int4: whether row k's nibble is the high one of its byte.
inline bool nibble_high(std::int64_t k) {
  return k % 8 >= 4;
}

inline void pack_group_params(PackedWeights& w, std::span<const float> scales,
                              std::span<const std::uint8_t> zeros,
                              std::span<const float> mins = {}) {
  const std::int64_t G = w.groups(), N = w.N;
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::int64_t dst = ((n / kPanelCols) * G + g) * kPanelCols + n % kPanelCols;
      w.scales[dst] = scales[g * N + n];
      if (!zeros.empty())
        w.zeros[dst] = zeros[g * N + n];
      if (!mins.empty())
        w.mins[dst] = mins[g * N + n];
    }
}

inline void set_nibble(PackedWeights& w, std::int64_t k, std::int64_t n, std::uint8_t u) {
  const std::int64_t off = elem_offset(w.format, w.stored_rows(), k, n);
  if (!nibble_high(k))
    w.data[off] = static_cast<std::uint8_t>((w.data[off] & 0xF0) | u);
  else
    w.data[off] = static_cast<std::uint8_t>((w.data[off] & 0x0F) | (u << 4));
}

inline std::uint8_t get_nibble(const PackedWeights& w, std::int64_t k, std::int64_t n) {
  const std::uint8_t b = w.data[elem_offset(w.format, w.stored_rows(), k, n)];
  return nibble_high(k) ? (b >> 4) : (b & 0x0F);
}

/// int6: code u in [0, 63] of row i (0..15) and column c (0..31) of the 16-row block at `blk`
/// (the layout in the file comment). The one scalar reading of the format: get_code6, the
/// portable decoder, the AMX staging and the packed gather all call it.
inline std::uint8_t block_code6(const std::uint8_t* blk, std::int64_t i, std::int64_t c) {
  const std::uint8_t b = blk[128 * (i / 8) + 4 * c + i % 4];
  const int lo = i % 8 >= 4 ? b >> 4 : b & 0x0F;
  const int hi = (blk[256 + 4 * c + i % 4] >> (2 * (i / 4))) & 3;
  return static_cast<std::uint8_t>(lo | hi << 4);
}

/// int6: start of the 16-row block of w that holds row k of column n's panel.
inline std::int64_t block6_offset(const PackedWeights& w, std::int64_t k, std::int64_t n) {
  return (n / kPanelCols * w.stored_rows() + k / 16 * 16) * row_bytes(WeightFormat::int6_sym);
}

/// int6: stores code u in [0, 63] of (k, n): its low nibble in the block's octets, its high two
/// bits in the block's 2-bit plane.
inline void set_code6(PackedWeights& w, std::int64_t k, std::int64_t n, std::uint8_t u) {
  set_nibble(w, k, n, static_cast<std::uint8_t>(u & 0x0F));
  const std::int64_t hb = block6_offset(w, k, n) + 256 + 4 * (n % kPanelCols) + k % 4;
  const int sh = 2 * static_cast<int>((k % 16) / 4);
  w.data[hb] = static_cast<std::uint8_t>((w.data[hb] & ~(3 << sh)) | ((u >> 4) << sh));
}

/// int6: code u in [0, 63] of (k, n).
inline std::uint8_t get_code6(const PackedWeights& w, std::int64_t k, std::int64_t n) {
  return block_code6(w.data.data() + block6_offset(w, k, n), k % 16, n % kPanelCols);
}

inline void check_perm(std::string_view what, std::span<const std::int32_t> perm, std::int64_t K) {
  if (perm.empty())
    return;
  if (static_cast<std::int64_t>(perm.size()) != K)
    throw_error(ErrorKind::invalid_input, "",
                std::string(what) + ": k_perm has " + std::to_string(perm.size()) +
                    " entries, K=" + std::to_string(K));
  std::vector<char> seen(static_cast<std::size_t>(K), 0);
  for (std::int32_t v : perm) {
    if (v < 0 || v >= K || seen[static_cast<std::size_t>(v)])
      throw_error(ErrorKind::invalid_input, "",
                  std::string(what) + ": k_perm is not a permutation of [0, K)");
    seen[static_cast<std::size_t>(v)] = 1;
  }
}

} // namespace detail

namespace detail {
/// Copies a float W: [K, N] row-major (elements of type T, stored bit for bit) into panels.
template <class T>
PackedWeights pack_float(const char* what, WeightFormat format, std::span<const T> w,
                         std::int64_t K, std::int64_t N) {
  check_pack_shape(what, K, N, w.size(), static_cast<std::size_t>(K * N));
  PackedWeights p = make_packed(format, K, N, K);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n)
      std::memcpy(p.data.data() + elem_offset(p.format, p.stored_rows(), k, n), &w[k * N + n],
                  sizeof(T));
  return p;
}
} // namespace detail

/// Packs f32 W: [K, N] row-major into WeightFormat::f32 panels.
inline PackedWeights pack_f32(std::span<const float> w, std::int64_t K, std::int64_t N) {
  return detail::pack_float("pack_f32", WeightFormat::f32, w, K, N);
}

/// Packs bf16 bits W: [K, N] row-major into WeightFormat::bf16 panels (interleaved 0,16,1,17..).
inline PackedWeights pack_bf16(std::span<const std::uint16_t> w, std::int64_t K, std::int64_t N) {
  return detail::pack_float("pack_bf16", WeightFormat::bf16, w, K, N);
}

/// Packs f16 bits W: [K, N] row-major into WeightFormat::f16 panels.
inline PackedWeights pack_f16(std::span<const std::uint16_t> w, std::int64_t K, std::int64_t N) {
  return detail::pack_float("pack_f16", WeightFormat::f16, w, K, N);
}

/// Packs int8 q: [K, N] row-major with scales: [K/group_size, N] row-major (w = q * scale).
/// group_size == K gives per-output-channel scales. Throws if K % group_size != 0.
inline PackedWeights pack_int8(std::span<const std::int8_t> q, std::span<const float> scales,
                               std::int64_t K, std::int64_t N, std::int64_t group_size) {
  detail::check_pack_shape("pack_int8", K, N, q.size(), static_cast<std::size_t>(K * N));
  const std::int64_t G = detail::check_group("pack_int8", K, group_size, 4);
  detail::check_pack_shape("pack_int8 scales", G, N, scales.size(),
                           static_cast<std::size_t>(G * N));
  PackedWeights p = detail::make_packed(WeightFormat::int8, K, N, group_size);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n)
      p.data[detail::elem_offset(p.format, p.stored_rows(), k, n)] =
          static_cast<std::uint8_t>(q[k * N + n]);
  detail::pack_group_params(p, scales, {});
  return p;
}

/// Packs int8 with per-output-channel scales: q: [K, N], scales: [N] (w = q * scale[n]).
inline PackedWeights pack_int8_per_channel(std::span<const std::int8_t> q,
                                           std::span<const float> scales, std::int64_t K,
                                           std::int64_t N) {
  return pack_int8(q, scales, K, N, K);
}

/// Packs symmetric int4: q: [K, N] row-major int8 values in [-8, 7], scales: [K/group_size, N]
/// (w = q * scale). `k_perm` (optional, [K]) names the original row of each packed row.
inline PackedWeights pack_int4_sym(std::span<const std::int8_t> q, std::span<const float> scales,
                                   std::int64_t K, std::int64_t N, std::int64_t group_size,
                                   std::span<const std::int32_t> k_perm = {}) {
  detail::check_pack_shape("pack_int4_sym", K, N, q.size(), static_cast<std::size_t>(K * N));
  const std::int64_t G = detail::check_group("pack_int4_sym", K, group_size, 8);
  detail::check_pack_shape("pack_int4_sym scales", G, N, scales.size(),
                           static_cast<std::size_t>(G * N));
  detail::check_perm("pack_int4_sym", k_perm, K);
  PackedWeights p = detail::make_packed(WeightFormat::int4_sym, K, N, group_size);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n) {
      const int v = q[k * N + n];
      if (v < -8 || v > 7)
        throw_error(ErrorKind::invalid_input, "",
                    "pack_int4_sym: value " + std::to_string(v) + " at (k=" + std::to_string(k) +
                        ", n=" + std::to_string(n) + ") is outside [-8, 7]");
      detail::set_nibble(p, k, n, static_cast<std::uint8_t>(v + 8));
    }
  detail::pack_group_params(p, scales, {});
  p.k_perm.assign(k_perm.begin(), k_perm.end());
  return p;
}

/// Packs asymmetric int4: q: [K, N] row-major in [0, 15], scales and zeros: [K/group_size, N]
/// (zeros in [0, 15]; w = (q - zero) * scale). `k_perm` as in pack_int4_sym.
inline PackedWeights pack_int4_asym(std::span<const std::uint8_t> q, std::span<const float> scales,
                                    std::span<const std::uint8_t> zeros, std::int64_t K,
                                    std::int64_t N, std::int64_t group_size,
                                    std::span<const std::int32_t> k_perm = {}) {
  detail::check_pack_shape("pack_int4_asym", K, N, q.size(), static_cast<std::size_t>(K * N));
  const std::int64_t G = detail::check_group("pack_int4_asym", K, group_size, 8);
  detail::check_pack_shape("pack_int4_asym scales", G, N, scales.size(),
                           static_cast<std::size_t>(G * N));
  detail::check_pack_shape("pack_int4_asym zeros", G, N, zeros.size(),
                           static_cast<std::size_t>(G * N));
  detail::check_perm("pack_int4_asym", k_perm, K);
  PackedWeights p = detail::make_packed(WeightFormat::int4_asym, K, N, group_size);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n) {
      const unsigned v = q[k * N + n];
      if (v > 15)
        throw_error(ErrorKind::invalid_input, "",
                    "pack_int4_asym: value " + std::to_string(v) + " at (k=" + std::to_string(k) +
                        ", n=" + std::to_string(n) + ") is outside [0, 15]");
      detail::set_nibble(p, k, n, static_cast<std::uint8_t>(v));
    }
  for (std::uint8_t z : zeros)
    if (z > 15)
      throw_error(ErrorKind::invalid_input, "",
                  "pack_int4_asym: zero point " + std::to_string(z) + " is outside [0, 15]");
  detail::pack_group_params(p, scales, zeros);
  p.k_perm.assign(k_perm.begin(), k_perm.end());
  return p;
}

/// Packs asymmetric int8: u: [K, N] row-major codes in [0, 255], scales and zeros: [K/group_size,
/// N] (w = (u - zero) * scale; group_size == K: per output channel). `k_perm` as in
/// pack_int4_sym.
inline PackedWeights pack_int8_asym(std::span<const std::uint8_t> u, std::span<const float> scales,
                                    std::span<const std::uint8_t> zeros, std::int64_t K,
                                    std::int64_t N, std::int64_t group_size,
                                    std::span<const std::int32_t> k_perm = {}) {
  detail::check_pack_shape("pack_int8_asym", K, N, u.size(), static_cast<std::size_t>(K * N));
  const std::int64_t G = detail::check_group("pack_int8_asym", K, group_size, 4);
  detail::check_pack_shape("pack_int8_asym scales", G, N, scales.size(),
                           static_cast<std::size_t>(G * N));
  detail::check_pack_shape("pack_int8_asym zeros", G, N, zeros.size(),
                           static_cast<std::size_t>(G * N));
  detail::check_perm("pack_int8_asym", k_perm, K);
  PackedWeights p = detail::make_packed(WeightFormat::int8_asym, K, N, group_size);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n)
      p.data[detail::elem_offset(p.format, p.stored_rows(), k, n)] = u[k * N + n];
  detail::pack_group_params(p, scales, zeros);
  p.k_perm.assign(k_perm.begin(), k_perm.end());
  return p;
}

namespace detail {
/// The scale-and-min packers' shared body: codes u [K, N] in [0, vmax] stored by `set(p, k, n,
/// u)`, scales and mins [K/group_size, N], groups a multiple of format f's row group or K.
template <class Set>
PackedWeights pack_min(WeightFormat f, std::string_view what, unsigned vmax,
                       std::span<const std::uint8_t> u, std::span<const float> scales,
                       std::span<const float> mins, std::int64_t K, std::int64_t N,
                       std::int64_t group_size, std::span<const std::int32_t> k_perm, Set set) {
  const std::string w(what);
  check_pack_shape(w, K, N, u.size(), static_cast<std::size_t>(K * N));
  const std::int64_t G = check_group(w, K, group_size, row_group(f));
  check_pack_shape(w + " scales", G, N, scales.size(), static_cast<std::size_t>(G * N));
  check_pack_shape(w + " mins", G, N, mins.size(), static_cast<std::size_t>(G * N));
  check_perm(w, k_perm, K);
  PackedWeights p = make_packed(f, K, N, group_size);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n) {
      const unsigned v = u[k * N + n];
      if (v > vmax)
        throw_error(ErrorKind::invalid_input, "",
                    w + ": value " + std::to_string(v) + " at (k=" + std::to_string(k) + ", n=" +
                        std::to_string(n) + ") is outside [0, " + std::to_string(vmax) + "]");
      set(p, k, n, static_cast<std::uint8_t>(v));
    }
  pack_group_params(p, scales, {}, mins);
  p.k_perm.assign(k_perm.begin(), k_perm.end());
  return p;
}
} // namespace detail

/// Packs "scale and min" int4: q: [K, N] row-major codes in [0, 15], scales and mins:
/// [K/group_size, N] row-major f32 (w = q * scale - min). group_size a multiple of 8 (16 and 32
/// are ggml's) or K. `k_perm` as in pack_int4_sym.
inline PackedWeights pack_int4_min(std::span<const std::uint8_t> q, std::span<const float> scales,
                                   std::span<const float> mins, std::int64_t K, std::int64_t N,
                                   std::int64_t group_size,
                                   std::span<const std::int32_t> k_perm = {}) {
  return detail::pack_min(WeightFormat::int4_min, "pack_int4_min", 15, q, scales, mins, K, N,
                          group_size, k_perm, detail::set_nibble);
}

/// Packs "scale and min" int8: u: [K, N] row-major codes in [0, 255], scales and mins:
/// [K/group_size, N] row-major f32 (w = u * scale - min). group_size a multiple of 4 or K.
/// `k_perm` as in pack_int4_sym.
inline PackedWeights pack_int8_min(std::span<const std::uint8_t> u, std::span<const float> scales,
                                   std::span<const float> mins, std::int64_t K, std::int64_t N,
                                   std::int64_t group_size,
                                   std::span<const std::int32_t> k_perm = {}) {
  return detail::pack_min(WeightFormat::int8_min, "pack_int8_min", 255, u, scales, mins, K, N,
                          group_size, k_perm,
                          [](PackedWeights& p, std::int64_t k, std::int64_t n, std::uint8_t v) {
                            p.data[detail::elem_offset(p.format, p.stored_rows(), k, n)] = v;
                          });
}

/// Packs 6-bit symmetric codes: q: [K, N] row-major int8 values in [-32, 31], scales:
/// [K/group_size, N] (w = q * scale; stored as u = q + 32, ggml's Q6_K codes). group_size a
/// multiple of 16 (Q6_K's is 16) or K. `k_perm` as in pack_int4_sym.
inline PackedWeights pack_int6_sym(std::span<const std::int8_t> q, std::span<const float> scales,
                                   std::int64_t K, std::int64_t N, std::int64_t group_size,
                                   std::span<const std::int32_t> k_perm = {}) {
  detail::check_pack_shape("pack_int6_sym", K, N, q.size(), static_cast<std::size_t>(K * N));
  const std::int64_t G = detail::check_group("pack_int6_sym", K, group_size, 16);
  detail::check_pack_shape("pack_int6_sym scales", G, N, scales.size(),
                           static_cast<std::size_t>(G * N));
  detail::check_perm("pack_int6_sym", k_perm, K);
  PackedWeights p = detail::make_packed(WeightFormat::int6_sym, K, N, group_size);
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n) {
      const int v = q[k * N + n];
      if (v < -32 || v > 31)
        throw_error(ErrorKind::invalid_input, "",
                    "pack_int6_sym: value " + std::to_string(v) + " at (k=" + std::to_string(k) +
                        ", n=" + std::to_string(n) + ") is outside [-32, 31]");
      detail::set_code6(p, k, n, static_cast<std::uint8_t>(v + 32));
    }
  detail::pack_group_params(p, scales, {});
  p.k_perm.assign(k_perm.begin(), k_perm.end());
  return p;
}

/// Packs "scale and min" 6-bit codes: u: [K, N] row-major codes in [0, 63], scales and mins:
/// [K/group_size, N] row-major f32 (w = u * scale - min; ggml's Q5_1 / Q5_K codes as stored).
/// group_size a multiple of 16 or K. `k_perm` as in pack_int4_sym.
inline PackedWeights pack_int6_min(std::span<const std::uint8_t> u, std::span<const float> scales,
                                   std::span<const float> mins, std::int64_t K, std::int64_t N,
                                   std::int64_t group_size,
                                   std::span<const std::int32_t> k_perm = {}) {
  return detail::pack_min(WeightFormat::int6_min, "pack_int6_min", 63, u, scales, mins, K, N,
                          group_size, k_perm, detail::set_code6);
}

/// W with its columns reordered: column n of the result is column `cols[n]` of `w` (weights,
/// scales, zeros and mins alike; rows and k_perm unchanged). `cols` must be a permutation of [0,
/// N). Used to fold an act-order down projection's row permutation into the gate / up columns.
inline PackedWeights permute_columns(const PackedWeights& w, std::span<const std::int32_t> cols) {
  detail::check_perm("permute_columns", cols, w.N);
  if (static_cast<std::int64_t>(cols.size()) != w.N)
    throw_error(ErrorKind::invalid_input, "",
                "permute_columns: expected " + std::to_string(w.N) + " columns, got " +
                    std::to_string(cols.size()));
  PackedWeights out = detail::make_packed(w.format, w.K, w.N, w.group_size, w.super_rows);
  out.k_perm = w.k_perm;
  const std::int64_t Kp = w.stored_rows();
  const bool nibbles = is_nibble_format(w.format);
  const std::size_t esz = static_cast<std::size_t>(
      is_byte_format(w.format) || nibbles ? 1 : row_bytes(w.format) / kPanelCols);
  for (std::int64_t n = 0; n < w.N; ++n) {
    const std::int64_t src = cols[static_cast<std::size_t>(n)];
    for (std::int64_t k = 0; k < Kp; ++k) {
      if (is_six_format(w.format))
        detail::set_code6(out, k, n, detail::get_code6(w, k, src));
      else if (nibbles)
        detail::set_nibble(out, k, n, detail::get_nibble(w, k, src));
      else
        std::memcpy(out.data.data() + detail::elem_offset(w.format, Kp, k, n),
                    w.data.data() + detail::elem_offset(w.format, Kp, k, src), esz);
    }
    // Every per-group array is [P][rows][32]: move column src's entries to column n.
    auto move_column = [&](auto& to, const auto& from, std::int64_t rows) {
      for (std::int64_t g = 0; g < (from.empty() ? 0 : rows); ++g)
        to[static_cast<std::size_t>(((n / kPanelCols) * rows + g) * kPanelCols + n % kPanelCols)] =
            from[static_cast<std::size_t>(((src / kPanelCols) * rows + g) * kPanelCols +
                                          src % kPanelCols)];
    };
    move_column(out.scales, w.scales, w.scale_rows());
    move_column(out.mins, w.mins, w.scale_rows());
    move_column(out.zeros, w.zeros, w.groups());
    move_column(out.scale_codes, w.scale_codes, w.groups());
    move_column(out.min_codes, w.min_codes, w.groups());
  }
  return out;
}

/// Reference dequantization: W: [K, N] row-major f32 in the ORIGINAL row order (k_perm undone).
inline std::vector<float> dequantize(const PackedWeights& w) {
  const std::int64_t K = w.K, N = w.N;
  std::vector<float> out(static_cast<std::size_t>(K * N));
  for (std::int64_t j = 0; j < K; ++j) {
    const std::int64_t k = w.k_perm.empty() ? j : w.k_perm[static_cast<std::size_t>(j)];
    const std::int64_t g = j / w.group_size;
    for (std::int64_t n = 0; n < N; ++n) {
      const std::uint8_t* b = w.data.data() + detail::elem_offset(w.format, w.stored_rows(), j, n);
      const std::int64_t p = n / kPanelCols, c = n % kPanelCols;
      const float sc = is_quantized(w.format) ? w.scale_of(p, g, c) : 0.0f;
      const float mn = has_mins(w.format) ? w.min_of(p, g, c) : 0.0f;
      const std::int64_t sp = (p * w.groups() + g) * kPanelCols + c; // zero points
      float v = 0;
      switch (w.format) {
      case WeightFormat::f32:
        std::memcpy(&v, b, 4);
        break;
      case WeightFormat::bf16: {
        std::uint16_t h;
        std::memcpy(&h, b, 2);
        v = bf16_to_f32(h);
        break;
      }
      case WeightFormat::f16: {
        std::uint16_t h;
        std::memcpy(&h, b, 2);
        v = f16_to_f32(h);
        break;
      }
      case WeightFormat::int8:
        v = static_cast<float>(static_cast<std::int8_t>(*b)) * sc;
        break;
      case WeightFormat::int4_sym:
        v = static_cast<float>(static_cast<int>(detail::get_nibble(w, j, n)) - 8) * sc;
        break;
      case WeightFormat::int4_asym:
        v = static_cast<float>(static_cast<int>(detail::get_nibble(w, j, n)) -
                               static_cast<int>(w.zeros[sp])) *
            sc;
        break;
      case WeightFormat::int8_asym:
        v = static_cast<float>(static_cast<int>(*b) - static_cast<int>(w.zeros[sp])) * sc;
        break;
      case WeightFormat::int4_min:
        v = static_cast<float>(detail::get_nibble(w, j, n)) * sc - mn;
        break;
      case WeightFormat::int8_min:
        v = static_cast<float>(*b) * sc - mn;
        break;
      case WeightFormat::int6_sym:
        v = static_cast<float>(static_cast<int>(detail::get_code6(w, j, n)) - 32) * sc;
        break;
      case WeightFormat::int6_min:
        v = static_cast<float>(detail::get_code6(w, j, n)) * sc - mn;
        break;
      }
      out[k * N + n] = v;
    }
  }
  return out;
}

} // namespace tpullm::kernels
