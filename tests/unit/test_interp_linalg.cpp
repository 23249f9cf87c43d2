// The interpreter's f64 products (interp/linalg.hpp) at every vector level this CPU has: each
// against a long-double reference, the levels against each other, and each bit for bit the same
// whatever the operands' alignment (the sums must not depend on where a buffer landed).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tpullm/interp/linalg.hpp"
#include "tpullm/kernels/cpu_features.hpp"

namespace {

using tpullm::kernels::Isa;
namespace linalg = tpullm::interp::linalg;

/// The levels this CPU runs, baseline first; the others are reported as skipped.
std::vector<Isa> levels() {
  std::vector<Isa> out{Isa::portable};
  for (Isa i : {Isa::avx2, Isa::avx512}) {
    if (static_cast<int>(tpullm::kernels::cpu_features().best()) >= static_cast<int>(i))
      out.push_back(i);
    else
      WARN("interp linalg: the " << tpullm::kernels::isa_name(i)
                                 << " products are skipped: this CPU lacks it");
  }
  return out;
}

/// `n` doubles in [-1, 1) from `seed`, placed `offset` doubles into a fresh buffer.
struct Buf {
  std::vector<double> store;
  double* p = nullptr;
  Buf(std::size_t n, std::size_t offset, std::uint32_t seed) : store(n + offset + 8) {
    p = store.data() + offset;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (std::size_t i = 0; i < n; ++i)
      p[i] = u(rng);
  }
};

struct Shape3 {
  std::int64_t M, K, N;
};

/// matmul at one level with every operand `offset` doubles past a buffer start.
std::vector<double> run_matmul(Isa isa, Shape3 s, bool bt, bool with_bias, std::size_t offset) {
  tpullm::kernels::ScopedIsa scoped(isa);
  Buf a(static_cast<std::size_t>(s.M * s.K), offset, 1),
      b(static_cast<std::size_t>(s.K * s.N), offset, 2),
      bias(static_cast<std::size_t>(s.N), offset, 3),
      out(static_cast<std::size_t>(s.M * s.N), offset, 4);
  linalg::matmul(a.p, b.p, with_bias ? bias.p : nullptr, out.p, s.M, s.K, s.N, bt);
  return {out.p, out.p + s.M * s.N};
}

std::vector<double> ref_matmul(Shape3 s, bool bt, bool with_bias) {
  Buf a(static_cast<std::size_t>(s.M * s.K), 0, 1), b(static_cast<std::size_t>(s.K * s.N), 0, 2),
      bias(static_cast<std::size_t>(s.N), 0, 3);
  std::vector<double> out(static_cast<std::size_t>(s.M * s.N));
  for (std::int64_t m = 0; m < s.M; ++m)
    for (std::int64_t n = 0; n < s.N; ++n) {
      long double acc = with_bias ? bias.p[n] : 0.0L;
      for (std::int64_t k = 0; k < s.K; ++k)
        acc +=
            static_cast<long double>(a.p[m * s.K + k]) * (bt ? b.p[n * s.K + k] : b.p[k * s.N + n]);
      out[static_cast<std::size_t>(m * s.N + n)] = static_cast<double>(acc);
    }
  return out;
}

/// Largest |x - y| over the largest |y|.
double rel_err(const std::vector<double>& x, const std::vector<double>& y) {
  double e = 0, m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    e = std::max(e, std::abs(x[i] - y[i]));
    m = std::max(m, std::abs(y[i]));
  }
  return e / std::max(m, 1e-300);
}

} // namespace

TEST_CASE("interp linalg: matmul at every vector level, exact and alignment-independent",
          "[interp][linalg]") {
  // Tiny (K + M + N < 20: Eigen's coefficient-wise size, the one whose sums followed the
  // operands' alignment), one row (GEMV), odd and block-crossing shapes, and enough columns that
  // the product splits over threads.
  const std::vector<Shape3> shapes = {{2, 12, 4},    {3, 9, 4},     {1, 16, 2}, {4, 13, 2},
                                      {3, 16, 16},   {1, 100, 37},  {5, 7, 3},  {17, 129, 65},
                                      {64, 96, 200}, {1, 640, 2048}};
  for (Isa isa : levels())
    for (const Shape3& s : shapes)
      for (bool bt : {true, false})
        for (bool bias : {false, true}) {
          INFO(tpullm::kernels::isa_name(isa) << " M=" << s.M << " K=" << s.K << " N=" << s.N
                                              << " transposed=" << bt << " bias=" << bias);
          const std::vector<double> at0 = run_matmul(isa, s, bt, bias, 0);
          CHECK(rel_err(at0, ref_matmul(s, bt, bias)) < 1e-14);
          CHECK(rel_err(at0, run_matmul(Isa::portable, s, bt, bias, 0)) < 1e-14);
          for (std::size_t off = 1; off < 8; ++off)
            CHECK(run_matmul(isa, s, bt, bias, off) == at0);
        }
}

TEST_CASE("interp linalg: attention products at every vector level, alignment-independent",
          "[interp][linalg]") {
  // q [L, heads, d] read one head at a time (row stride heads * d), as the interpreter does.
  struct Dims {
    std::int64_t L, S, heads, d;
  };
  // Tiny (both products below Eigen's coefficient-wise size) and larger.
  for (const Dims& dims : {Dims{3, 10, 3, 4}, Dims{2, 12, 3, 4}, Dims{5, 23, 3, 12}})
    for (Isa isa : levels()) {
      const std::int64_t L = dims.L, S = dims.S, heads = dims.heads, d = dims.d;
      INFO(tpullm::kernels::isa_name(isa) << " L=" << L << " S=" << S << " d=" << d);
      tpullm::kernels::ScopedIsa scoped(isa);
      std::vector<double> first_scores, first_out;
      for (std::size_t off = 0; off < 8; ++off) {
        Buf q(static_cast<std::size_t>(L * heads * d), off, 5),
            k(static_cast<std::size_t>(S * heads * d), off, 6),
            v(static_cast<std::size_t>(S * heads * d), off, 7),
            s(static_cast<std::size_t>(L * S), off, 8),
            o(static_cast<std::size_t>(L * heads * d), off, 9);
        linalg::scaled_scores(q.p + d, heads * d, k.p + d, heads * d, s.p, L, S, d, 0.25);
        linalg::weighted_values(s.p, v.p + 2 * d, heads * d, o.p + d, heads * d, L, S, d);
        std::vector<double> scores(s.p, s.p + L * S), out;
        for (std::int64_t i = 0; i < L; ++i)
          out.insert(out.end(), o.p + i * heads * d + d, o.p + i * heads * d + 2 * d);
        if (off == 0) {
          // Reference of head 1: scores = 0.25 q k^T, out = scores v (v of head 2).
          std::vector<double> rs(scores.size()), ro(out.size());
          for (std::int64_t i = 0; i < L; ++i)
            for (std::int64_t j = 0; j < S; ++j) {
              long double acc = 0;
              for (std::int64_t c = 0; c < d; ++c)
                acc += static_cast<long double>(q.p[i * heads * d + d + c]) *
                       k.p[j * heads * d + d + c];
              rs[static_cast<std::size_t>(i * S + j)] = static_cast<double>(0.25L * acc);
            }
          for (std::int64_t i = 0; i < L; ++i)
            for (std::int64_t c = 0; c < d; ++c) {
              long double acc = 0;
              for (std::int64_t j = 0; j < S; ++j)
                acc += static_cast<long double>(scores[static_cast<std::size_t>(i * S + j)]) *
                       v.p[j * heads * d + 2 * d + c];
              ro[static_cast<std::size_t>(i * d + c)] = static_cast<double>(acc);
            }
          CHECK(rel_err(scores, rs) < 1e-14);
          CHECK(rel_err(out, ro) < 1e-14);
          first_scores = scores;
          first_out = out;
        } else {
          CHECK(scores == first_scores);
          CHECK(out == first_out);
        }
      }
    }
}

TEST_CASE("interp linalg: the products follow the kernels' ISA choice", "[interp][linalg]") {
  {
    tpullm::kernels::ScopedIsa scoped(Isa::portable);
    CHECK(std::string(linalg::products_level()) == "baseline");
  }
  if (static_cast<int>(tpullm::kernels::cpu_features().best()) >= static_cast<int>(Isa::avx2)) {
    tpullm::kernels::ScopedIsa scoped(Isa::avx2);
    CHECK(std::string(linalg::products_level()) == "avx2");
  }
  if (static_cast<int>(tpullm::kernels::cpu_features().best()) >= static_cast<int>(Isa::avx512)) {
    tpullm::kernels::ScopedIsa scoped(Isa::avx512);
    CHECK(std::string(linalg::products_level()) == "avx512");
  }
}
