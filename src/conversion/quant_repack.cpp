// Out-of-line definitions of tpullm/conversion/quant_repack.hpp (compiled once into tpullm_core).
#include "tpullm/conversion/quant_repack.hpp"
#include "tpullm/kernels/two_level_scales.hpp"

namespace tpullm::conversion {

auto QuantPlain::dequantize() const -> std::vector<float> {
  std::vector<float> w(static_cast<std::size_t>(K * N));
  for (std::int64_t k = 0; k < K; ++k) {
    const std::int64_t g = g_idx.empty() ? k / group_size : g_idx[static_cast<std::size_t>(k)];
    if (!mins.empty()) {
      for (std::int64_t n = 0; n < N; ++n)
        w[k * N + n] = static_cast<float>(q[k * N + n]) * scales[g * N + n] - mins[g * N + n];
      continue;
    }
    for (std::int64_t n = 0; n < N; ++n)
      w[k * N + n] = (static_cast<float>(q[k * N + n]) - static_cast<float>(zeros[g * N + n])) *
                     scales[g * N + n];
  }
  return w;
}

} // namespace tpullm::conversion

namespace tpullm::conversion::detail {

void expect_size(const char* what, std::size_t have, std::int64_t want) {
  if (static_cast<std::int64_t>(have) != want)
    throw Error(ErrorKind::invalid_input, "",
                std::string(what) + ": expected " + std::to_string(want) + " elements, got " +
                    std::to_string(have));
}

std::int64_t groups_of(const char* what, std::int64_t K, std::int64_t N, std::int64_t group_size,
                       std::int64_t pack) {
  if (K <= 0 || N <= 0 || K % pack != 0 || N % pack != 0)
    throw Error(ErrorKind::invalid_input, "",
                std::string(what) + ": K and N must be positive multiples of " +
                    std::to_string(pack) + ", got K=" + std::to_string(K) +
                    " N=" + std::to_string(N));
  if (group_size <= 0 || K % group_size != 0)
    throw Error(ErrorKind::invalid_input, "",
                std::string(what) + ": K=" + std::to_string(K) +
                    " is not a multiple of group_size=" + std::to_string(group_size));
  return K / group_size;
}

} // namespace tpullm::conversion::detail

namespace tpullm::conversion {

QuantPlain unpack_gptq(std::span<const std::int32_t> qweight, std::span<const std::int32_t> qzeros,
                       std::span<const float> scales, std::span<const std::int32_t> g_idx,
                       std::int64_t K, std::int64_t N, std::int64_t group_size, int zero_offset,
                       int bits) {
  if (bits != 4 && bits != 8)
    throw Error(ErrorKind::unsupported, "",
                "unpack_gptq: " + std::to_string(bits) + "-bit weights are not supported (4, 8)");
  const int pack = 32 / bits, qmax = (1 << bits) - 1;
  const std::int64_t G = detail::groups_of("unpack_gptq", K, N, group_size, pack);
  const std::string p_s = std::to_string(pack);
  detail::expect_size(("unpack_gptq qweight [K/" + p_s + ", N]").c_str(), qweight.size(),
                      K / pack * N);
  detail::expect_size(("unpack_gptq qzeros [G, N/" + p_s + "]").c_str(), qzeros.size(),
                      G * N / pack);
  detail::expect_size("unpack_gptq scales [G, N]", scales.size(), G * N);
  if (!g_idx.empty())
    detail::expect_size("unpack_gptq g_idx [K]", g_idx.size(), K);
  QuantPlain p;
  p.K = K;
  p.N = N;
  p.bits = bits;
  p.group_size = group_size;
  p.q.resize(static_cast<std::size_t>(K * N));
  for (std::int64_t r = 0; r < K / pack; ++r)
    for (std::int64_t n = 0; n < N; ++n)
      for (int i = 0; i < pack; ++i)
        p.q[(pack * r + i) * N + n] = detail::field(qweight[r * N + n], i, bits);
  p.zeros.resize(static_cast<std::size_t>(G * N));
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t c = 0; c < N / pack; ++c)
      for (int i = 0; i < pack; ++i) {
        const int z = detail::field(qzeros[g * (N / pack) + c], i, bits) + zero_offset;
        if (z < 0 || z > qmax)
          throw Error(ErrorKind::invalid_input, "",
                      "unpack_gptq: zero point " + std::to_string(z) + " (group " +
                          std::to_string(g) + ") is outside [0, " + std::to_string(qmax) + "]");
        p.zeros[g * N + pack * c + i] = static_cast<std::uint8_t>(z);
      }
  p.scales.assign(scales.begin(), scales.end());
  p.g_idx.resize(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k) {
    const std::int64_t g = g_idx.empty() ? k / group_size : g_idx[static_cast<std::size_t>(k)];
    if (g < 0 || g >= G)
      throw Error(ErrorKind::invalid_input, "",
                  "unpack_gptq: g_idx[" + std::to_string(k) + "]=" + std::to_string(g) +
                      " is outside [0, " + std::to_string(G) + ")");
    p.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(g);
  }
  return p;
}

QuantPlain unpack_awq(std::span<const std::int32_t> qweight, std::span<const std::int32_t> qzeros,
                      std::span<const float> scales, std::int64_t K, std::int64_t N,
                      std::int64_t group_size) {
  const std::int64_t G = detail::groups_of("unpack_awq", K, N, group_size);
  detail::expect_size("unpack_awq qweight [K, N/8]", qweight.size(), K * N / 8);
  detail::expect_size("unpack_awq qzeros [G, N/8]", qzeros.size(), G * N / 8);
  detail::expect_size("unpack_awq scales [G, N]", scales.size(), G * N);
  QuantPlain p;
  p.K = K;
  p.N = N;
  p.group_size = group_size;
  p.q.resize(static_cast<std::size_t>(K * N));
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i)
        p.q[k * N + 8 * c + kAwqOrder[i]] = detail::nib(qweight[k * (N / 8) + c], i);
  p.zeros.resize(static_cast<std::size_t>(G * N));
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i)
        p.zeros[g * N + 8 * c + kAwqOrder[i]] = detail::nib(qzeros[g * (N / 8) + c], i);
  p.scales.assign(scales.begin(), scales.end());
  p.g_idx.resize(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k)
    p.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(k / group_size);
  return p;
}

} // namespace tpullm::conversion

namespace tpullm::conversion::detail {

std::vector<float> widen_f16(std::span<const std::uint16_t> h) {
  std::vector<float> f(h.size());
  for (std::size_t i = 0; i < h.size(); ++i)
    f[i] = f16_to_f32(h[i]);
  return f;
}

} // namespace tpullm::conversion::detail

namespace tpullm::conversion {

std::vector<std::int32_t> group_sorted_rows(const QuantPlain& p) {
  const std::int64_t G = p.K / p.group_size;
  std::vector<std::int64_t> count(static_cast<std::size_t>(G), 0);
  for (std::int32_t g : p.g_idx)
    ++count[static_cast<std::size_t>(g)];
  for (std::int64_t g = 0; g < G; ++g)
    if (count[static_cast<std::size_t>(g)] != p.group_size)
      throw Error(ErrorKind::invalid_input, "",
                  "repack: group " + std::to_string(g) + " has " +
                      std::to_string(count[static_cast<std::size_t>(g)]) +
                      " rows in g_idx, the packed layout needs exactly group_size=" +
                      std::to_string(p.group_size));
  std::vector<std::int32_t> perm(static_cast<std::size_t>(p.K));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](std::int32_t a, std::int32_t b) {
    return p.g_idx[static_cast<std::size_t>(a)] < p.g_idx[static_cast<std::size_t>(b)];
  });
  return perm;
}

namespace {

kernels::PackedWeights repack_one_level(const QuantPlain& p, bool allow_sym) {
  const std::int64_t K = p.K, N = p.N;
  if (p.bits != 4 && p.bits != 6 && p.bits != 8)
    throw Error(ErrorKind::unsupported, "",
                "repack_quant: " + std::to_string(p.bits) +
                    "-bit codes are not supported (4, 6, 8)");
  if (p.group_size <= 0 || K % p.group_size != 0)
    throw Error(ErrorKind::invalid_input, "",
                "repack_quant: K=" + std::to_string(K) +
                    " is not a multiple of group_size=" + std::to_string(p.group_size));
  if (!p.g_idx.empty())
    detail::expect_size("repack_quant g_idx [K]", p.g_idx.size(), K);
  bool natural = true;
  for (std::int64_t k = 0; k < K && !p.g_idx.empty(); ++k)
    natural = natural && p.g_idx[static_cast<std::size_t>(k)] == k / p.group_size;
  std::vector<std::int32_t> perm;
  if (!natural)
    perm = group_sorted_rows(p);
  auto src_row = [&](std::int64_t j) {
    return perm.empty() ? j : perm[static_cast<std::size_t>(j)];
  };
  if (!p.mins.empty()) { // scale and min: codes, scales and mins kept as they are
    if (!p.zeros.empty())
      throw Error(ErrorKind::invalid_input, "",
                  "repack_quant: a weight has either zero points or mins, not both");
    const std::int64_t G = K / p.group_size;
    detail::expect_size("repack_quant scales [G, N]", p.scales.size(), G * N);
    detail::expect_size("repack_quant mins [G, N]", p.mins.size(), G * N);
    detail::expect_size("repack_quant q [K, N]", p.q.size(), K * N);
    std::vector<std::uint8_t> u(static_cast<std::size_t>(K * N));
    for (std::int64_t j = 0; j < K; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        u[j * N + n] = p.q[src_row(j) * N + n];
    if (p.bits == 6)
      return kernels::pack_int6_min(u, p.scales, p.mins, K, N, p.group_size, perm);
    return p.bits == 8 ? kernels::pack_int8_min(u, p.scales, p.mins, K, N, p.group_size, perm)
                       : kernels::pack_int4_min(u, p.scales, p.mins, K, N, p.group_size, perm);
  }
  if (p.bits == 6) { // ggml's Q6_K: codes value + 32, symmetric only
    check(p.mins.empty() &&
              std::all_of(p.zeros.begin(), p.zeros.end(), [](std::uint8_t z) { return z == 32; }),
          ErrorKind::unsupported, "repack_quant",
          "6-bit codes are packed symmetric (zero point 32) only");
    std::vector<std::int8_t> q(static_cast<std::size_t>(K * N));
    for (std::int64_t j = 0; j < K; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        q[j * N + n] = static_cast<std::int8_t>(static_cast<int>(p.q[src_row(j) * N + n]) - 32);
    return kernels::pack_int6_sym(q, p.scales, K, N, p.group_size, perm);
  }
  if (p.bits == 8) {
    const bool sym8 = allow_sym && std::all_of(p.zeros.begin(), p.zeros.end(),
                                               [](std::uint8_t z) { return z == 128; });
    if (!sym8) {
      std::vector<std::uint8_t> u(static_cast<std::size_t>(K * N));
      for (std::int64_t j = 0; j < K; ++j)
        for (std::int64_t n = 0; n < N; ++n)
          u[j * N + n] = p.q[src_row(j) * N + n];
      return kernels::pack_int8_asym(u, p.scales, p.zeros, K, N, p.group_size, perm);
    }
    std::vector<std::int8_t> q(static_cast<std::size_t>(K * N));
    for (std::int64_t j = 0; j < K; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        q[j * N + n] = static_cast<std::int8_t>(static_cast<int>(p.q[src_row(j) * N + n]) - 128);
    // Act-order 8-bit: rows are group-sorted, so packed row j of group g covers original row
    // perm[j]; the int8 packer has no k_perm argument, so it is set afterwards.
    kernels::PackedWeights w = kernels::pack_int8(q, p.scales, K, N, p.group_size);
    w.k_perm = perm;
    return w;
  }
  const bool sym = allow_sym && std::all_of(p.zeros.begin(), p.zeros.end(),
                                            [](std::uint8_t z) { return z == 8; });
  if (sym) {
    std::vector<std::int8_t> q(static_cast<std::size_t>(K * N));
    for (std::int64_t j = 0; j < K; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        q[j * N + n] = static_cast<std::int8_t>(static_cast<int>(p.q[src_row(j) * N + n]) - 8);
    return kernels::pack_int4_sym(q, p.scales, K, N, p.group_size, perm);
  }
  std::vector<std::uint8_t> q(static_cast<std::size_t>(K * N));
  for (std::int64_t j = 0; j < K; ++j)
    for (std::int64_t n = 0; n < N; ++n)
      q[j * N + n] = p.q[src_row(j) * N + n];
  return kernels::pack_int4_asym(q, p.scales, p.zeros, K, N, p.group_size, perm);
}

} // namespace

kernels::PackedWeights repack_quant(const QuantPlain& p, bool allow_sym) {
  kernels::PackedWeights w = repack_one_level(p, allow_sym);
  if (p.super_rows == 0)
    return w;
  return kernels::with_two_level_scales(std::move(w), p.super_rows, p.scale_codes, p.super_scales,
                                        p.min_codes, p.super_mins);
}

} // namespace tpullm::conversion
