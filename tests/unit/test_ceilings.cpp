// The machine ceilings' helpers (devtools/ceilings.hpp) that `tpullm bench` and the kernel
// benchmarks judge figures against: the last-level cache size and the read ceiling measured next
// to a figure, and the compute peaks measured next to one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "tpullm/kernels/cpu_features.hpp"
#include "tpullm/devtools/ceilings.hpp"

using namespace tpullm;

TEST_CASE("last_level_cache_bytes reads a plausible size", "[ceilings]") {
  const long long llc = machine::last_level_cache_bytes();
  // Every machine this project runs on has a cache of at least 256 KiB and below 4 GiB.
  CHECK(llc >= (256LL << 10));
  CHECK(llc < (4LL << 30));
}

TEST_CASE("read_bandwidth_now refuses what would measure the cache", "[ceilings]") {
  std::vector<float> small(1 << 16, 1.0f);
  const machine::ReadNow r = machine::read_bandwidth_now(small.data(), small.size() * 4, 2);
  CHECK(r.gbs == 0);
  CHECK(r.pattern.empty());
  CHECK(machine::read_bandwidth_now(nullptr, std::size_t{1} << 30, 2).gbs == 0);
  CHECK(machine::read_bandwidth_now(small.data(), small.size() * 4, 0).gbs == 0);
}

TEST_CASE("read_bandwidth_now measures a resident region beyond the cache", "[ceilings]") {
  const std::size_t bytes = machine::read_now_min_bytes();
  if (bytes > (std::size_t{512} << 20)) {
    WARN("SKIPPED: the least region here is " << (bytes >> 20) << " MiB (cache of "
                                              << (machine::last_level_cache_bytes() >> 20)
                                              << " MiB); the test reads at most 512 MiB");
    return;
  }
  // 4 KiB more than the least region, unaligned by one float: the call trims to 4 KiB pages.
  const std::size_t n = (bytes + 4096) / sizeof(float) + 1;
  std::unique_ptr<float[]> buf(new float[n]);
  std::fill(buf.get(), buf.get() + n, 1.0f);
  for (int threads : {1, 2}) {
    const machine::ReadNow r = machine::read_bandwidth_now(buf.get() + 1, (n - 1) * 4, threads);
    INFO("threads " << threads << ": " << r.gbs << " GB/s, " << r.pattern);
    CHECK(r.gbs > 0.1);   // any memory reads faster than 100 MB/s
    CHECK(r.gbs < 10000); // and slower than 10 TB/s
    CHECK(r.pattern.find("/thread, pf ") != std::string::npos);
  }
  // A region one page short of the least is refused.
  CHECK(machine::read_bandwidth_now(buf.get(), bytes - 4096, 2).gbs == 0);
}

TEST_CASE("compute_ceiling_now measures the peaks this CPU has", "[ceilings]") {
  const auto& f = tpullm::kernels::cpu_features();
  CHECK(machine::compute_ceiling_now(machine::Ceiling::read, 2) == 0);
  for (int threads : {1, 2}) {
    const double fma = machine::compute_ceiling_now(machine::Ceiling::f32_fma, threads);
    INFO("threads " << threads << ": f32 FMA " << fma / 1e9 << " GFLOP/s");
    if (machine::vector_width_now() > 0) { // TPULLM_ISA=portable leaves no vector loop
      CHECK(fma > 1e9);                    // any x86 core with FMA does more than 1 GFLOP/s
      CHECK(fma < 1e14);                   // and less than 100 TFLOP/s
    } else {
      CHECK(fma == 0);
    }
    const double bf16 = machine::compute_ceiling_now(machine::Ceiling::bf16_dot, threads);
    CHECK((bf16 > 0) == f.avx512_bf16);
    const double amx = machine::compute_ceiling_now(machine::Ceiling::amx_int8, threads);
    CHECK((amx > 0) == f.amx);
  }
}

TEST_CASE("The f32 FMA and read ceilings follow TPULLM_ISA's vector width", "[ceilings]") {
  const auto& f = tpullm::kernels::cpu_features();
  if (!f.avx2) {
    CHECK(machine::vector_width_now() == 0);
    WARN("skipped: the CPU lacks AVX2, only the portable path's width was checked");
    return;
  }
  {
    tpullm::kernels::ScopedIsa held(tpullm::kernels::Isa::avx2);
    CHECK(machine::vector_width_now() == 256);
    CHECK(machine::compute_ceiling_now(machine::Ceiling::f32_fma, 1) > 1e9);
  }
  {
    tpullm::kernels::ScopedIsa held(tpullm::kernels::Isa::portable);
    CHECK(machine::vector_width_now() == 0);
    CHECK(machine::compute_ceiling_now(machine::Ceiling::f32_fma, 1) == 0);
  }
  if (!f.avx512) {
    WARN("skipped: the CPU lacks AVX-512, its 512-bit width was not checked");
    return;
  }
  tpullm::kernels::ScopedIsa held(tpullm::kernels::Isa::avx512);
  CHECK(machine::vector_width_now() == 512);
}
