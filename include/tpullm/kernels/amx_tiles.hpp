#pragma once
/// The AMX tile operations the kernels use, behind one small interface with two implementations:
///
///   amx::Hw   the real instructions (`_tile_*` intrinsics, compiled with TPULLM_TARGET_AMX; x86
///             only, callable only where cpu_features().amx);
///   amx::Emu  a scalar emulator with the instructions' semantics (palette 1: 8 tiles of up to
///             16 rows x 64 bytes; loads and stores move `rows` x `colsb` bytes and zero the rest
///             of the tile; TDPBF16PS accumulates even and odd bf16 products in two f32 sums with
///             DAZ / FTZ / round-to-nearest-even and adds them to C; TDPB[SU][SU]D sum four
///             8-bit products per dword into wrapping int32; shape mismatches between C, A and B
///             and use before configuration raise Error(internal) where hardware raises #UD).
///
/// Tile kernels are templates over the implementation, so on any machine the tests run every
/// AMX kernel through Emu (packing, tiling, edge tiles, scales), and through Hw only where the
/// CPU and OS grant AMX. The emulator keeps its state per thread, as the hardware does.
///
/// Calling convention of both: `configure(cfg)` once per thread and shape set, then
/// `zero<t>()`, `load<t>(ptr, stride)`, `store<t>(ptr, stride)`, `dpbf16ps<c, a, b>()`,
/// `dpbssd / dpbsud / dpbusd / dpbuud<c, a, b>()`, and `release()`; tile numbers are template
/// arguments because the instructions encode them.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "tpullm/kernels/isa_target.hpp"
#include "tpullm/support/error.hpp"

#if TPULLM_X86
#include <immintrin.h>
#endif

namespace tpullm::kernels::amx {

/// Tile limits of palette 1.
inline constexpr int kTiles = 8, kMaxRows = 16, kMaxColsb = 64;

/// The 64-byte LDTILECFG operand (palette 1): per tile, rows and bytes per row.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};

  /// Sets tile t to `r` rows of `cb` bytes (r <= 16, cb <= 64).
  TileConfig& set(int t, int r, int cb) {
    if (t < 0 || t >= kTiles || r < 1 || r > kMaxRows || cb < 4 || cb > kMaxColsb || cb % 4)
      throw_error(ErrorKind::internal, "",
                  "amx::TileConfig: tile " + std::to_string(t) + " rows " + std::to_string(r) +
                      " colsb " + std::to_string(cb) + " is outside palette 1");
    rows[t] = static_cast<std::uint8_t>(r);
    colsb[t] = static_cast<std::uint16_t>(cb);
    return *this;
  }
};
static_assert(sizeof(TileConfig) == 64);

/// Scalar emulator of the tile unit (per-thread state).
struct Emu {
  struct State {
    TileConfig cfg;
    bool configured = false;
    alignas(64) std::uint8_t t[kTiles][kMaxRows][kMaxColsb] = {};
  };
  static State& st() {
    thread_local State s;
    return s;
  }
  /// Configurations loaded on the emulator so far, all threads (a test's proof that a kernel
  /// really took its AMX path, where the results alone cannot tell).
  static std::atomic<std::uint64_t>& configures() {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }
  static void configure(const TileConfig& c) {
    if (c.palette != 1)
      throw_error(ErrorKind::internal, "", "amx::Emu: only palette 1 is emulated");
    configures().fetch_add(1, std::memory_order_relaxed);
    State& s = st();
    s.cfg = c;
    s.configured = true;
    std::memset(s.t, 0, sizeof s.t);
  }
  static void release() {
    State& s = st();
    s.configured = false;
    std::memset(s.t, 0, sizeof s.t);
  }
  static void check(int t, const char* what) {
    const State& s = st();
    if (!s.configured)
      throw_error(ErrorKind::internal, "", std::string("amx::Emu: ") + what + " before configure");
    if (s.cfg.rows[t] == 0 || s.cfg.colsb[t] == 0)
      throw_error(ErrorKind::internal, "",
                  std::string("amx::Emu: ") + what + " on unconfigured tile " + std::to_string(t));
  }
  template <int T>
  static void zero() {
    check(T, "tilezero");
    std::memset(st().t[T], 0, sizeof st().t[T]);
  }
  template <int T>
  static void load(const void* base, std::int64_t stride) {
    check(T, "tileloadd");
    State& s = st();
    const int r = s.cfg.rows[T], cb = s.cfg.colsb[T];
    std::memset(s.t[T], 0, sizeof s.t[T]);
    for (int i = 0; i < r; ++i)
      std::memcpy(s.t[T][i], static_cast<const std::uint8_t*>(base) + i * stride,
                  static_cast<std::size_t>(cb));
  }
  template <int T>
  static void store(void* base, std::int64_t stride) {
    check(T, "tilestored");
    const State& s = st();
    const int r = s.cfg.rows[T], cb = s.cfg.colsb[T];
    for (int i = 0; i < r; ++i)
      std::memcpy(static_cast<std::uint8_t*>(base) + i * stride, s.t[T][i],
                  static_cast<std::size_t>(cb));
  }
  /// The #UD shape rules of the dot-product instructions: C and A have the same rows, A's dwords
  /// per row equal B's rows, B and C have the same bytes per row.
  static void check_dp(int c, int a, int b, const char* what) {
    check(c, what);
    check(a, what);
    check(b, what);
    if (c == a || c == b || a == b)
      throw_error(ErrorKind::internal, "",
                  std::string("amx::Emu: ") + what + " with repeated tile operands");
    const TileConfig& g = st().cfg;
    if (g.rows[c] != g.rows[a] || g.colsb[a] / 4 != g.rows[b] || g.colsb[b] != g.colsb[c])
      throw_error(ErrorKind::internal, "",
                  std::string("amx::Emu: ") + what + " shape mismatch: C " +
                      std::to_string(g.rows[c]) + "x" + std::to_string(g.colsb[c]) + "B, A " +
                      std::to_string(g.rows[a]) + "x" + std::to_string(g.colsb[a]) + "B, B " +
                      std::to_string(g.rows[b]) + "x" + std::to_string(g.colsb[b]) + "B");
  }
  /// f32 with denormals flushed to (signed) zero.
  static float ftz(float v) {
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    if ((u & 0x7F800000u) == 0)
      u &= 0x80000000u;
    std::memcpy(&v, &u, 4);
    return v;
  }
  /// bf16 bits -> f32 with denormal inputs read as zero.
  static float bf16(std::uint16_t h) {
    return ftz([&] {
      const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
      float v;
      std::memcpy(&v, &u, 4);
      return v;
    }());
  }
  template <int C, int A, int B>
  static void dpbf16ps() {
    check_dp(C, A, B, "tdpbf16ps");
    State& s = st();
    const int M = s.cfg.rows[C], N = s.cfg.colsb[C] / 4, K = s.cfg.colsb[A] / 4;
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float even = 0.f, odd = 0.f;
        for (int k = 0; k < K; ++k) {
          std::uint16_t a0, a1, b0, b1;
          std::memcpy(&a0, &s.t[A][m][4 * k], 2);
          std::memcpy(&a1, &s.t[A][m][4 * k + 2], 2);
          std::memcpy(&b0, &s.t[B][k][4 * n], 2);
          std::memcpy(&b1, &s.t[B][k][4 * n + 2], 2);
          // bf16 x bf16 is exact in f32, so a fused multiply-add rounds once like the hardware
          even = ftz(__builtin_fmaf(bf16(a0), bf16(b0), even));
          odd = ftz(__builtin_fmaf(bf16(a1), bf16(b1), odd));
        }
        float c;
        std::memcpy(&c, &s.t[C][m][4 * n], 4);
        c = ftz(ftz(c) + ftz(even + odd));
        std::memcpy(&s.t[C][m][4 * n], &c, 4);
      }
  }
  template <int C, int A, int B, bool ASigned, bool BSigned>
  static void dpb() {
    check_dp(C, A, B, "tdpb*d");
    State& s = st();
    const int M = s.cfg.rows[C], N = s.cfg.colsb[C] / 4, K = s.cfg.colsb[A] / 4;
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        std::uint32_t acc;
        std::memcpy(&acc, &s.t[C][m][4 * n], 4);
        for (int k = 0; k < K; ++k)
          for (int j = 0; j < 4; ++j) {
            const std::int32_t a = ASigned ? static_cast<std::int8_t>(s.t[A][m][4 * k + j])
                                           : static_cast<std::int32_t>(s.t[A][m][4 * k + j]);
            const std::int32_t b = BSigned ? static_cast<std::int8_t>(s.t[B][k][4 * n + j])
                                           : static_cast<std::int32_t>(s.t[B][k][4 * n + j]);
            acc += static_cast<std::uint32_t>(a * b); // wraps like the hardware
          }
        std::memcpy(&s.t[C][m][4 * n], &acc, 4);
      }
  }
  template <int C, int A, int B>
  static void dpbssd() {
    dpb<C, A, B, true, true>();
  }
  template <int C, int A, int B>
  static void dpbsud() {
    dpb<C, A, B, true, false>();
  }
  template <int C, int A, int B>
  static void dpbusd() {
    dpb<C, A, B, false, true>();
  }
  template <int C, int A, int B>
  static void dpbuud() {
    dpb<C, A, B, false, false>();
  }
};

#if TPULLM_X86
/// The tile instructions themselves (call only from TPULLM_TARGET_AMX code, where AMX is usable).
/// GCC's `_tile_*` macros paste the tile number into the instruction text, so each template
/// argument maps to a literal here; the dot products cover the triples the kernels use (C tiles
/// 0-3, A tiles 4-5, B tiles 6-7).
struct Hw {
  TPULLM_TARGET_AMX static inline void configure(const TileConfig& c) { _tile_loadconfig(&c); }
  TPULLM_TARGET_AMX static inline void release() { _tile_release(); }
  template <int T>
  TPULLM_TARGET_AMX static inline __attribute__((always_inline)) void zero() {
    if constexpr (T == 0) {
      _tile_zero(0);
    } else if constexpr (T == 1) {
      _tile_zero(1);
    } else if constexpr (T == 2) {
      _tile_zero(2);
    } else if constexpr (T == 3) {
      _tile_zero(3);
    } else if constexpr (T == 4) {
      _tile_zero(4);
    } else if constexpr (T == 5) {
      _tile_zero(5);
    } else if constexpr (T == 6) {
      _tile_zero(6);
    } else if constexpr (T == 7) {
      _tile_zero(7);
    } else {
      static_assert(T < 8, "tile number");
    }
  }
  template <int T>
  TPULLM_TARGET_AMX static inline __attribute__((always_inline)) void load(const void* base,
                                                                           std::int64_t stride) {
    if constexpr (T == 0) {
      _tile_loadd(0, base, stride);
    } else if constexpr (T == 1) {
      _tile_loadd(1, base, stride);
    } else if constexpr (T == 2) {
      _tile_loadd(2, base, stride);
    } else if constexpr (T == 3) {
      _tile_loadd(3, base, stride);
    } else if constexpr (T == 4) {
      _tile_loadd(4, base, stride);
    } else if constexpr (T == 5) {
      _tile_loadd(5, base, stride);
    } else if constexpr (T == 6) {
      _tile_loadd(6, base, stride);
    } else if constexpr (T == 7) {
      _tile_loadd(7, base, stride);
    } else {
      static_assert(T < 8, "tile number");
    }
  }
  template <int T>
  TPULLM_TARGET_AMX static inline __attribute__((always_inline)) void store(void* base,
                                                                            std::int64_t stride) {
    if constexpr (T == 0) {
      _tile_stored(0, base, stride);
    } else if constexpr (T == 1) {
      _tile_stored(1, base, stride);
    } else if constexpr (T == 2) {
      _tile_stored(2, base, stride);
    } else if constexpr (T == 3) {
      _tile_stored(3, base, stride);
    } else if constexpr (T == 4) {
      _tile_stored(4, base, stride);
    } else if constexpr (T == 5) {
      _tile_stored(5, base, stride);
    } else if constexpr (T == 6) {
      _tile_stored(6, base, stride);
    } else if constexpr (T == 7) {
      _tile_stored(7, base, stride);
    } else {
      static_assert(T < 8, "tile number");
    }
  }
  template <int C, int A, int B>
  TPULLM_TARGET_AMX static inline __attribute__((always_inline)) void dpbf16ps() {
    if constexpr (C == 0 && A == 4 && B == 6) {
      _tile_dpbf16ps(0, 4, 6);
    } else if constexpr (C == 0 && A == 4 && B == 7) {
      _tile_dpbf16ps(0, 4, 7);
    } else if constexpr (C == 0 && A == 5 && B == 6) {
      _tile_dpbf16ps(0, 5, 6);
    } else if constexpr (C == 0 && A == 5 && B == 7) {
      _tile_dpbf16ps(0, 5, 7);
    } else if constexpr (C == 1 && A == 4 && B == 6) {
      _tile_dpbf16ps(1, 4, 6);
    } else if constexpr (C == 1 && A == 4 && B == 7) {
      _tile_dpbf16ps(1, 4, 7);
    } else if constexpr (C == 1 && A == 5 && B == 6) {
      _tile_dpbf16ps(1, 5, 6);
    } else if constexpr (C == 1 && A == 5 && B == 7) {
      _tile_dpbf16ps(1, 5, 7);
    } else if constexpr (C == 2 && A == 4 && B == 6) {
      _tile_dpbf16ps(2, 4, 6);
    } else if constexpr (C == 2 && A == 4 && B == 7) {
      _tile_dpbf16ps(2, 4, 7);
    } else if constexpr (C == 2 && A == 5 && B == 6) {
      _tile_dpbf16ps(2, 5, 6);
    } else if constexpr (C == 2 && A == 5 && B == 7) {
      _tile_dpbf16ps(2, 5, 7);
    } else if constexpr (C == 3 && A == 4 && B == 6) {
      _tile_dpbf16ps(3, 4, 6);
    } else if constexpr (C == 3 && A == 4 && B == 7) {
      _tile_dpbf16ps(3, 4, 7);
    } else if constexpr (C == 3 && A == 5 && B == 6) {
      _tile_dpbf16ps(3, 5, 6);
    } else if constexpr (C == 3 && A == 5 && B == 7) {
      _tile_dpbf16ps(3, 5, 7);
    } else {
      static_assert(C < 4 && (A == 4 || A == 5) && (B == 6 || B == 7),
                    "amx::Hw: tile triple outside C 0-3, A 4-5, B 6-7");
    }
  }
  template <int C, int A, int B>
  TPULLM_TARGET_AMX static inline __attribute__((always_inline)) void dpbssd() {
    if constexpr (C == 0 && A == 4 && B == 6) {
      _tile_dpbssd(0, 4, 6);
    } else if constexpr (C == 0 && A == 4 && B == 7) {
      _tile_dpbssd(0, 4, 7);
    } else if constexpr (C == 0 && A == 5 && B == 6) {
      _tile_dpbssd(0, 5, 6);
    } else if constexpr (C == 0 && A == 5 && B == 7) {
      _tile_dpbssd(0, 5, 7);
    } else if constexpr (C == 1 && A == 4 && B == 6) {
      _tile_dpbssd(1, 4, 6);
    } else if constexpr (C == 1 && A == 4 && B == 7) {
      _tile_dpbssd(1, 4, 7);
    } else if constexpr (C == 1 && A == 5 && B == 6) {
      _tile_dpbssd(1, 5, 6);
    } else if constexpr (C == 1 && A == 5 && B == 7) {
      _tile_dpbssd(1, 5, 7);
    } else if constexpr (C == 2 && A == 4 && B == 6) {
      _tile_dpbssd(2, 4, 6);
    } else if constexpr (C == 2 && A == 4 && B == 7) {
      _tile_dpbssd(2, 4, 7);
    } else if constexpr (C == 2 && A == 5 && B == 6) {
      _tile_dpbssd(2, 5, 6);
    } else if constexpr (C == 2 && A == 5 && B == 7) {
      _tile_dpbssd(2, 5, 7);
    } else if constexpr (C == 3 && A == 4 && B == 6) {
      _tile_dpbssd(3, 4, 6);
    } else if constexpr (C == 3 && A == 4 && B == 7) {
      _tile_dpbssd(3, 4, 7);
    } else if constexpr (C == 3 && A == 5 && B == 6) {
      _tile_dpbssd(3, 5, 6);
    } else if constexpr (C == 3 && A == 5 && B == 7) {
      _tile_dpbssd(3, 5, 7);
    } else if constexpr (C == 0 && A == 6 && B == 7) {
      _tile_dpbssd(0, 6, 7);
    } else if constexpr (C == 1 && A == 6 && B == 7) {
      _tile_dpbssd(1, 6, 7);
    } else if constexpr (C == 2 && A == 6 && B == 7) {
      _tile_dpbssd(2, 6, 7);
    } else if constexpr (C == 3 && A == 6 && B == 7) {
      _tile_dpbssd(3, 6, 7);
    } else if constexpr (C == 4 && A == 6 && B == 7) {
      _tile_dpbssd(4, 6, 7);
    } else if constexpr (C == 5 && A == 6 && B == 7) {
      _tile_dpbssd(5, 6, 7);
    } else {
      static_assert((C < 4 && (A == 4 || A == 5) && (B == 6 || B == 7)) ||
                        (C < 6 && A == 6 && B == 7),
                    "amx::Hw: tile triple outside C 0-3, A 4-5, B 6-7 and C 0-5, A 6, B 7");
    }
  }
  template <int C, int A, int B>
  TPULLM_TARGET_AMX static inline __attribute__((always_inline)) void dpbsud() {
    if constexpr (C == 0 && A == 4 && B == 6) {
      _tile_dpbsud(0, 4, 6);
    } else if constexpr (C == 0 && A == 4 && B == 7) {
      _tile_dpbsud(0, 4, 7);
    } else if constexpr (C == 0 && A == 5 && B == 6) {
      _tile_dpbsud(0, 5, 6);
    } else if constexpr (C == 0 && A == 5 && B == 7) {
      _tile_dpbsud(0, 5, 7);
    } else if constexpr (C == 1 && A == 4 && B == 6) {
      _tile_dpbsud(1, 4, 6);
    } else if constexpr (C == 1 && A == 4 && B == 7) {
      _tile_dpbsud(1, 4, 7);
    } else if constexpr (C == 1 && A == 5 && B == 6) {
      _tile_dpbsud(1, 5, 6);
    } else if constexpr (C == 1 && A == 5 && B == 7) {
      _tile_dpbsud(1, 5, 7);
    } else if constexpr (C == 2 && A == 4 && B == 6) {
      _tile_dpbsud(2, 4, 6);
    } else if constexpr (C == 2 && A == 4 && B == 7) {
      _tile_dpbsud(2, 4, 7);
    } else if constexpr (C == 2 && A == 5 && B == 6) {
      _tile_dpbsud(2, 5, 6);
    } else if constexpr (C == 2 && A == 5 && B == 7) {
      _tile_dpbsud(2, 5, 7);
    } else if constexpr (C == 3 && A == 4 && B == 6) {
      _tile_dpbsud(3, 4, 6);
    } else if constexpr (C == 3 && A == 4 && B == 7) {
      _tile_dpbsud(3, 4, 7);
    } else if constexpr (C == 3 && A == 5 && B == 6) {
      _tile_dpbsud(3, 5, 6);
    } else if constexpr (C == 3 && A == 5 && B == 7) {
      _tile_dpbsud(3, 5, 7);
    } else if constexpr (C == 0 && A == 6 && B == 7) {
      _tile_dpbsud(0, 6, 7);
    } else if constexpr (C == 1 && A == 6 && B == 7) {
      _tile_dpbsud(1, 6, 7);
    } else if constexpr (C == 2 && A == 6 && B == 7) {
      _tile_dpbsud(2, 6, 7);
    } else if constexpr (C == 3 && A == 6 && B == 7) {
      _tile_dpbsud(3, 6, 7);
    } else if constexpr (C == 4 && A == 6 && B == 7) {
      _tile_dpbsud(4, 6, 7);
    } else if constexpr (C == 5 && A == 6 && B == 7) {
      _tile_dpbsud(5, 6, 7);
    } else {
      static_assert((C < 4 && (A == 4 || A == 5) && (B == 6 || B == 7)) ||
                        (C < 6 && A == 6 && B == 7),
                    "amx::Hw: tile triple outside C 0-3, A 4-5, B 6-7 and C 0-5, A 6, B 7");
    }
  }
  template <int C, int A, int B>
  TPULLM_TARGET_AMX static inline __attribute__((always_inline)) void dpbusd() {
    if constexpr (C == 0 && A == 4 && B == 6) {
      _tile_dpbusd(0, 4, 6);
    } else if constexpr (C == 0 && A == 4 && B == 7) {
      _tile_dpbusd(0, 4, 7);
    } else if constexpr (C == 0 && A == 5 && B == 6) {
      _tile_dpbusd(0, 5, 6);
    } else if constexpr (C == 0 && A == 5 && B == 7) {
      _tile_dpbusd(0, 5, 7);
    } else if constexpr (C == 1 && A == 4 && B == 6) {
      _tile_dpbusd(1, 4, 6);
    } else if constexpr (C == 1 && A == 4 && B == 7) {
      _tile_dpbusd(1, 4, 7);
    } else if constexpr (C == 1 && A == 5 && B == 6) {
      _tile_dpbusd(1, 5, 6);
    } else if constexpr (C == 1 && A == 5 && B == 7) {
      _tile_dpbusd(1, 5, 7);
    } else if constexpr (C == 2 && A == 4 && B == 6) {
      _tile_dpbusd(2, 4, 6);
    } else if constexpr (C == 2 && A == 4 && B == 7) {
      _tile_dpbusd(2, 4, 7);
    } else if constexpr (C == 2 && A == 5 && B == 6) {
      _tile_dpbusd(2, 5, 6);
    } else if constexpr (C == 2 && A == 5 && B == 7) {
      _tile_dpbusd(2, 5, 7);
    } else if constexpr (C == 3 && A == 4 && B == 6) {
      _tile_dpbusd(3, 4, 6);
    } else if constexpr (C == 3 && A == 4 && B == 7) {
      _tile_dpbusd(3, 4, 7);
    } else if constexpr (C == 3 && A == 5 && B == 6) {
      _tile_dpbusd(3, 5, 6);
    } else if constexpr (C == 3 && A == 5 && B == 7) {
      _tile_dpbusd(3, 5, 7);
    } else {
      static_assert(C < 4 && (A == 4 || A == 5) && (B == 6 || B == 7),
                    "amx::Hw: tile triple outside C 0-3, A 4-5, B 6-7");
    }
  }
  template <int C, int A, int B>
  TPULLM_TARGET_AMX static inline __attribute__((always_inline)) void dpbuud() {
    if constexpr (C == 0 && A == 4 && B == 6) {
      _tile_dpbuud(0, 4, 6);
    } else if constexpr (C == 0 && A == 4 && B == 7) {
      _tile_dpbuud(0, 4, 7);
    } else if constexpr (C == 0 && A == 5 && B == 6) {
      _tile_dpbuud(0, 5, 6);
    } else if constexpr (C == 0 && A == 5 && B == 7) {
      _tile_dpbuud(0, 5, 7);
    } else if constexpr (C == 1 && A == 4 && B == 6) {
      _tile_dpbuud(1, 4, 6);
    } else if constexpr (C == 1 && A == 4 && B == 7) {
      _tile_dpbuud(1, 4, 7);
    } else if constexpr (C == 1 && A == 5 && B == 6) {
      _tile_dpbuud(1, 5, 6);
    } else if constexpr (C == 1 && A == 5 && B == 7) {
      _tile_dpbuud(1, 5, 7);
    } else if constexpr (C == 2 && A == 4 && B == 6) {
      _tile_dpbuud(2, 4, 6);
    } else if constexpr (C == 2 && A == 4 && B == 7) {
      _tile_dpbuud(2, 4, 7);
    } else if constexpr (C == 2 && A == 5 && B == 6) {
      _tile_dpbuud(2, 5, 6);
    } else if constexpr (C == 2 && A == 5 && B == 7) {
      _tile_dpbuud(2, 5, 7);
    } else if constexpr (C == 3 && A == 4 && B == 6) {
      _tile_dpbuud(3, 4, 6);
    } else if constexpr (C == 3 && A == 4 && B == 7) {
      _tile_dpbuud(3, 4, 7);
    } else if constexpr (C == 3 && A == 5 && B == 6) {
      _tile_dpbuud(3, 5, 6);
    } else if constexpr (C == 3 && A == 5 && B == 7) {
      _tile_dpbuud(3, 5, 7);
    } else {
      static_assert(C < 4 && (A == 4 || A == 5) && (B == 6 || B == 7),
                    "amx::Hw: tile triple outside C 0-3, A 4-5, B 6-7");
    }
  }
};
#endif

/// Which implementation the AMX kernels run on.
enum class Backend { hardware, emulator };

namespace detail {
inline bool& emulation_flag() {
  static bool on = false;
  return on;
}
} // namespace detail

/// Test hook: while alive, the kernels that have an AMX path (linear / MLP for M >= 16 with bf16,
/// int8 or int4 weights; prefill attention) take it on the scalar emulator, on any CPU, whatever
/// the active Isa. Not thread-safe: create it on the thread that calls the kernels.
class ScopedEmulation {
public:
  ScopedEmulation() : saved_(detail::emulation_flag()) { detail::emulation_flag() = true; }
  ~ScopedEmulation() { detail::emulation_flag() = saved_; }
  ScopedEmulation(const ScopedEmulation&) = delete;
  ScopedEmulation& operator=(const ScopedEmulation&) = delete;

private:
  bool saved_;
};

/// True while a ScopedEmulation is alive.
inline bool emulation_forced() {
  return detail::emulation_flag();
}

} // namespace tpullm::kernels::amx
