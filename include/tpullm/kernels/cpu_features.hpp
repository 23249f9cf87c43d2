#pragma once
/// Run-time CPU feature detection and code-path selection for the kernel library.
///
/// Kernels compile every path into the same binary (AVX-512 and AVX2 paths use GCC's
/// `__attribute__((target(...)))`, no global -march) and pick one per call from `active_isa()`.
/// `TPULLM_ISA=portable|avx2|avx512|amx` in the environment, or `set_isa_override()`, forces a
/// path (never one the CPU lacks), so tests can exercise the portable fallback on any machine.
/// AMX counts as present only when CPUID reports AMX-TILE/BF16/INT8, the OS enables the tile
/// state in XCR0 and Linux grants this process the tile data (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`); otherwise the AVX-512 path runs. On non-x86 builds (or with
/// TPULLM_PORTABLE_ONLY) every feature is false and only `portable` exists.

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "tpullm/kernels/isa_target.hpp"
#include "tpullm/support/error.hpp"

#if TPULLM_X86
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace tpullm::kernels {

/// Instruction-set levels the kernels have paths for, ordered from least to most capable.
/// `amx` is AVX-512 plus the AMX tile unit: kernels without an AMX path run their AVX-512 code.
enum class Isa { portable = 0, avx2 = 1, avx512 = 2, amx = 3 };

/// Printable name of an Isa ("portable", "avx2", "avx512", "amx").
constexpr std::string_view isa_name(Isa isa) {
  switch (isa) {
  case Isa::portable:
    return "portable";
  case Isa::avx2:
    return "avx2";
  case Isa::avx512:
    return "avx512";
  case Isa::amx:
    return "amx";
  }
  return "?";
}

/// The vector ISA of a path: `amx` runs the AVX-512 code of kernels without tile code.
constexpr Isa vector_isa(Isa isa) {
  return isa == Isa::amx ? Isa::avx512 : isa;
}

/// What this CPU supports, read once from CPUID (and XGETBV for OS-enabled register state).
struct CpuFeatures {
  bool avx2 = false;        ///< AVX2 + FMA + F16C, OS saves YMM state
  bool avx512 = false;      ///< AVX-512 F/BW/DQ/VL, OS saves ZMM state
  bool avx512_bf16 = false; ///< VDPBF16PS
  bool avx512_vnni = false; ///< VPDPBUSD
  bool avx512_fp16 = false; ///< AVX512-FP16 arithmetic
  bool avx_vnni = false;    ///< AVX-VNNI: VEX-encoded 256-bit VPDPBUSD (with AVX2)
  bool amx_cpuid = false;   ///< CPUID reports AMX-TILE + AMX-BF16 + AMX-INT8 (with AVX-512)
  bool amx = false; ///< amx_cpuid, tile state enabled in XCR0 and tile data granted by Linux
  bool amd = false; ///< vendor AuthenticAMD (CPUID leaf 0)

  /// Reads the running CPU (and, if it has AMX, asks Linux for the tile-data permission).
  static CpuFeatures detect() {
    CpuFeatures f;
#if TPULLM_X86
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d)) // "Auth" "enti" "cAMD" in EBX, EDX, ECX
      f.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
    if (!__get_cpuid(1, &a, &b, &c, &d))
      return f;
    const bool osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    unsigned long long xcr0 = 0;
    if (osxsave) {
      unsigned lo = 0, hi = 0;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
    }
    const bool ymm_os = (xcr0 & 0x6) == 0x6;
    const bool zmm_os = (xcr0 & 0xE6) == 0xE6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
      return f;
    const bool avx2 = (b >> 5) & 1;
    const bool avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1,
               avx512vl = (b >> 31) & 1;
    f.avx2 = avx2 && fma && f16c && ymm_os;
    f.avx512 = f.avx2 && avx512f && avx512dq && avx512bw && avx512vl && zmm_os;
    f.avx512_vnni = f.avx512 && ((c >> 11) & 1);
    f.avx512_fp16 = f.avx512 && ((d >> 23) & 1);
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
      f.avx512_bf16 = f.avx512 && ((a1 >> 5) & 1);
      f.avx_vnni = f.avx2 && ((a1 >> 4) & 1); // leaf 7.1 EAX bit 4
    }
    // leaf 7 EDX: bit 22 AMX-BF16, bit 24 AMX-TILE, bit 25 AMX-INT8; XCR0 bits 17-18 tile state
    f.amx_cpuid = f.avx512 && ((d >> 22) & 1) && ((d >> 24) & 1) && ((d >> 25) & 1);
    const bool tile_os = ((xcr0 >> 17) & 3) == 3;
    f.amx = f.amx_cpuid && tile_os && request_tile_data();
#endif
    return f;
  }

  /// The most capable Isa this CPU supports.
  Isa best() const {
    return amx ? Isa::amx : avx512 ? Isa::avx512 : avx2 ? Isa::avx2 : Isa::portable;
  }

private:
  /// Linux keeps AMX tile data off until a process asks: arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023,
  /// XFEATURE_XTILEDATA = 18). True when granted.
  static bool request_tile_data() {
#if TPULLM_X86 && defined(__linux__) && defined(SYS_arch_prctl)
    return ::syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return false;
#endif
  }
};

/// The CPU's features, detected once per process.
inline const CpuFeatures& cpu_features() {
  static const CpuFeatures f = CpuFeatures::detect();
  return f;
}

/// Parses "portable" | "avx2" | "avx512" | "amx"; nullopt for anything else.
inline std::optional<Isa> parse_isa(std::string_view s) {
  if (s == "portable")
    return Isa::portable;
  if (s == "avx2")
    return Isa::avx2;
  if (s == "avx512")
    return Isa::avx512;
  if (s == "amx")
    return Isa::amx;
  return std::nullopt;
}

namespace detail {
inline std::optional<Isa>& isa_override_slot() {
  static std::optional<Isa> slot = []() -> std::optional<Isa> {
    const char* env = std::getenv("TPULLM_ISA");
    if (!env || !*env)
      return std::nullopt;
    auto isa = parse_isa(env);
    if (!isa)
      throw_error(ErrorKind::invalid_input, "TPULLM_ISA",
                  "TPULLM_ISA='" + std::string(env) +
                      "' is not one of portable, avx2, avx512, amx");
    return isa;
  }();
  return slot;
}
} // namespace detail

/// Forces the kernels onto `isa` (nullopt restores automatic choice). Throws
/// Error(unsupported) if the CPU lacks it.
inline void set_isa_override(std::optional<Isa> isa) {
  if (isa && static_cast<int>(*isa) > static_cast<int>(cpu_features().best()))
    throw_error(ErrorKind::unsupported, "",
                "cannot force ISA '" + std::string(isa_name(*isa)) +
                    "': this CPU supports at most '" +
                    std::string(isa_name(cpu_features().best())) + "'");
  detail::isa_override_slot() = isa;
}

/// The path the kernels take now: the override if one is set, else the best the CPU has.
inline Isa active_isa() {
  const auto& o = detail::isa_override_slot();
  if (o) {
    if (static_cast<int>(*o) > static_cast<int>(cpu_features().best()))
      throw_error(ErrorKind::unsupported, "TPULLM_ISA",
                  "TPULLM_ISA asks for '" + std::string(isa_name(*o)) +
                      "' but this CPU supports at most '" +
                      std::string(isa_name(cpu_features().best())) + "'");
    return *o;
  }
  return cpu_features().best();
}

/// RAII guard that forces an Isa for a scope (tests use it to run the portable path).
class ScopedIsa {
public:
  explicit ScopedIsa(Isa isa) : saved_(detail::isa_override_slot()) { set_isa_override(isa); }
  ~ScopedIsa() { detail::isa_override_slot() = saved_; }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

private:
  std::optional<Isa> saved_;
};

} // namespace tpullm::kernels
