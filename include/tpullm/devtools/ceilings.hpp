#pragma once
/// Ceilings of this machine, measured in the process that uses them (a few seconds): read
/// bandwidth (best over access patterns: interleaved streams and prefetch distances, on a buffer
/// larger than the last-level cache), the f32 FMA peak, the bf16 / int8 dot-product peaks, and
/// the AMX peaks where the CPU has AMX. Figures are judged against these (bench/roofline.hpp for
/// the kernel benchmarks, `tpullm bench` for a bundle).

#include <cstdint>
#include <optional>
#include <string>

namespace tpullm::machine {

/// Ceilings of this machine (0 when an instruction is not available).
struct Ceilings {
  double read_gbs_1t = 0;    ///< read bandwidth, 1 thread, GB/s: best over access patterns
  double read_gbs_2t = 0;    ///< read bandwidth, 2 threads, GB/s: best over access patterns
  std::string read_best_1t;  ///< the pattern that reached read_gbs_1t ("4 streams, pf 1 KiB")
  std::string read_best_2t;  ///< the pattern that reached read_gbs_2t
  double read1_gbs_1t = 0;   ///< one stream per thread (best prefetch distance), 1 thread
  double read1_gbs_2t = 0;   ///< one stream per thread (best prefetch distance), 2 threads
  double f32_gflops_1t = 0;  ///< f32 FMA peak, 1 thread, GFLOP/s (FMA = 2 flops)
  double f32_gflops_2t = 0;  ///< f32 FMA peak, 2 threads, GFLOP/s
  double bf16_gflops_1t = 0; ///< vdpbf16ps peak, 1 thread, GFLOP/s (0 without AVX512_BF16)
  double bf16_gflops_2t = 0; ///< vdpbf16ps peak, 2 threads, GFLOP/s (0 without AVX512_BF16)
  double int8_gops_2t = 0;   ///< vpdpbusd peak, 2 threads, GOP/s (0 without AVX512_VNNI)
  double int8_gops_1t = 0;   ///< vpdpbusd zmm peak, 1 thread, GOP/s (MAC = 2 ops)
  double int8_avx_vnni_gops_1t = 0; ///< VEX vpdpbusd ymm peak, 1 thread (0 without AVX-VNNI)
  double int8_avx_vnni_gops_2t = 0; ///< VEX vpdpbusd ymm peak, 2 threads
  double int8_avx2_gops_1t = 0;     ///< vpmaddwd ymm peak, 1 thread, GOP/s (16 MACs = 32 ops each)
  double int8_avx2_gops_2t = 0;     ///< vpmaddwd ymm peak, 2 threads (the AVX2 W8A8 path's op)
  bool amx = false;                 ///< AMX usable (CPUID + XCR0 + Linux tile-data permission)
  double amx_bf16_gflops_1t = 0;    ///< tdpbf16ps peak (register-resident tile loop), 1 thread
  double amx_bf16_gflops_2t = 0;    ///< tdpbf16ps peak, 2 threads
  double amx_int8_gops_1t = 0;      ///< tdpbssd peak, 1 thread, GOP/s (MAC = 2 ops)
  double amx_int8_gops_2t = 0;      ///< tdpbssd peak, 2 threads
};

/// The ceiling a figure is a fraction of.
/// int8_vnni / int8_avx_vnni / int8_avx2: the multiply-add peak of the instruction each W8A8
/// path is built on (vpdpbusd zmm, vpdpbusd ymm, vpmaddwd ymm), in ops (MAC = 2).
/// bf16_dot: the vdpbf16ps peak the bf16 GEMM on AVX512_BF16 (no AMX) is built on.
enum class Ceiling {
  read,
  f32_fma,
  bf16_dot,
  amx_bf16,
  amx_int8,
  int8_vnni,
  int8_avx_vnni,
  int8_avx2
};

/// Measures the ceilings (a few seconds; called by main before the benchmarks run).
const Ceilings& measure_ceilings();

/// The measured ceilings (measures them on first use if main has not; all zero after
/// disable_ceilings()).
const Ceilings& ceilings();

/// Skips the measurement: ceilings() stays zero and roofline_frac reports 0.
void disable_ceilings();

/// Prints the ceilings to stdout in one block (AMX lines say "not available on this CPU" when
/// the CPU or OS lacks it).
void print_ceilings(const Ceilings& c);

/// Bytes / byte-per-second of a ceiling for `threads` (0 if not measured or not available).
double ceiling_value(Ceiling which, int threads);

/// The ceiling of the W8A8 path a product of `rows` rows takes on this CPU now (AMX-INT8,
/// vpdpbusd zmm or ymm, vpmaddwd ymm; see kernels::w8a8_path), with the path's name in `path`;
/// nullopt on the portable path, which has no measured peak.
std::optional<Ceiling> w8a8_ceiling(std::int64_t rows, std::string& path);

/// The vector width in bits (512, 256, or 0 for the portable path) of the f32 FMA and read
/// ceilings' loops: the widest the kernels use at the active ISA, so that `TPULLM_ISA=avx2` on an
/// AVX-512 CPU judges its figures against the AVX2 peaks (the f32 FMA peak halves on some CPUs).
/// The dot-product and tile peaks name their instructions and follow the CPU.
int vector_width_now();

/// The compute peak `which` measured now, in flops (or ops) per second: the start-up ceiling's
/// loop for that instruction, a fifth of its length (about 50 ms for 5 passes on 2 threads).
/// A compute figure is judged against this taken next to it, because a VM's compute can move
/// too (measured: a start-up f32 FMA sweep of 251 GFLOP/s between runs of 450-516 on one VM).
/// 0 for Ceiling::read and for an instruction this CPU lacks.
double compute_ceiling_now(Ceiling which, int threads);

/// A read bandwidth measured now (0 when it could not be).
struct ReadNow {
  double gbs = 0;      ///< GB/s: the best of the read ceiling's patterns, one pass each
  std::string pattern; ///< the pattern that reached it
};

/// The read ceiling measured now over [p, p + bytes) (trimmed to 4 KiB boundaries): the
/// patterns of the start-up ceiling (1, 2, 4, 8 streams per thread x prefetch 0, 1, 4 KiB), one
/// pass each, `threads` threads each reading its own part; about 12 x bytes read. A figure that
/// reads memory is judged against this taken right before and after it, because a VM's memory
/// bandwidth can move by half within a minute (measured: 46 to 81 GB/s on one 2-core VM). The
/// memory must be resident (a first pass faults it in: measure twice). Returns gbs 0 for a
/// region below read_now_min_bytes() (it would measure the cache).
ReadNow read_bandwidth_now(const void* p, std::size_t bytes, int threads);

/// The least region read_bandwidth_now measures: max(256 MiB, 4 x last_level_cache_bytes()).
std::size_t read_now_min_bytes();

/// Bytes of cpu0's last-level cache: sysfs (/sys/devices/system/cpu/cpu0/cache), else sysconf
/// (L3, else L2); 0 when neither says.
long long last_level_cache_bytes();

/// read_bandwidth_now over a buffer of this process of read_now_min_bytes() (1040 MiB where
/// sysfs says 260 MiB of L3), allocated and filled on first use and kept until exit (the kernel
/// benchmarks' per-row ceiling).
ReadNow read_ceiling_now(int threads);

/// Bytes a benchmark rotates its inputs over so every iteration reads DRAM, not the last-level
/// cache: max(1 GiB, 2 x last_level_cache_bytes()), at most 4 GiB.
long long dram_rotation_bytes();

} // namespace tpullm::machine
