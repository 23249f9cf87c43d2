// Round-to-nearest quantization of float weights (conversion/rtn_quantize.hpp).
#include "tpullm/conversion/rtn_quantize.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace tpullm::conversion {

QuantPlain rtn_quantize(std::span<const float> w, std::int64_t K, std::int64_t N,
                        const RtnOptions& o) {
  const char* where = "rtn_quantize";
  check(o.bits == 4 || o.bits == 8, ErrorKind::invalid_input, where, "bits must be 4 or 8, got ",
        o.bits);
  check(K > 0 && N > 0 && static_cast<std::int64_t>(w.size()) == K * N, ErrorKind::invalid_input,
        where, "expected [K=", K, ", N=", N, "] = ", K * N, " values, got ", w.size());
  const std::int64_t group = o.group_size == 0 ? K : o.group_size;
  check(group > 0 && K % group == 0, ErrorKind::invalid_input, where, "group size ", group,
        " does not divide K = ", K);
  check(group == K || group % 8 == 0, ErrorKind::invalid_input, where, "group size ", group,
        " must be a multiple of 8 (or 0: per output channel)");
  const std::int64_t G = K / group;
  const int qmax = (1 << o.bits) - 1, half = 1 << (o.bits - 1);
  QuantPlain p;
  p.K = K;
  p.N = N;
  p.bits = o.bits;
  p.group_size = group;
  p.q.resize(static_cast<std::size_t>(K * N));
  p.scales.resize(static_cast<std::size_t>(G * N));
  p.zeros.resize(static_cast<std::size_t>(G * N));
  p.g_idx.resize(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k)
    p.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(k / group);
  std::vector<float> lo(static_cast<std::size_t>(N)), hi(static_cast<std::size_t>(N));
  for (std::int64_t g = 0; g < G; ++g) {
    std::fill(lo.begin(), lo.end(), 0.0f);
    std::fill(hi.begin(), hi.end(), 0.0f);
    for (std::int64_t k = g * group; k < (g + 1) * group; ++k)
      for (std::int64_t n = 0; n < N; ++n) {
        const float v = w[static_cast<std::size_t>(k * N + n)];
        check(std::isfinite(v), ErrorKind::invalid_input, where, "value ", v, " at (k=", k,
              ", n=", n, ") is not finite");
        lo[static_cast<std::size_t>(n)] = std::min(lo[static_cast<std::size_t>(n)], v);
        hi[static_cast<std::size_t>(n)] = std::max(hi[static_cast<std::size_t>(n)], v);
      }
    for (std::int64_t n = 0; n < N; ++n) {
      const float l = lo[static_cast<std::size_t>(n)], h = hi[static_cast<std::size_t>(n)];
      float scale = 0;
      int zero = half;
      if (o.symmetric) {
        scale = std::max(-l, h) / static_cast<float>(half - 1);
      } else {
        scale = (h - l) / static_cast<float>(qmax);
        if (scale > 0)
          zero = std::clamp(static_cast<int>(std::nearbyint(-l / scale)), 0, qmax);
      }
      if (!(scale > 0))
        scale = 1.0f; // an all-zero group: every code is the zero point
      p.scales[static_cast<std::size_t>(g * N + n)] = scale;
      p.zeros[static_cast<std::size_t>(g * N + n)] = static_cast<std::uint8_t>(zero);
      const int qlo = o.symmetric ? 1 : 0; // symmetric codes: zero +- (half - 1)
      for (std::int64_t k = g * group; k < (g + 1) * group; ++k) {
        const float v = w[static_cast<std::size_t>(k * N + n)];
        const int q = std::clamp(static_cast<int>(std::nearbyint(v / scale)) + zero, qlo, qmax);
        p.q[static_cast<std::size_t>(k * N + n)] = static_cast<std::uint8_t>(q);
      }
    }
  }
  return p;
}

} // namespace tpullm::conversion
