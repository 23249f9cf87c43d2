// Out-of-line definitions of tpullm/frontend/quant_pack.hpp (compiled once into tpullm_core).
#include "tpullm/frontend/quant_pack.hpp"

namespace tpullm::frontend {

std::vector<std::int32_t> pack_gptq_qweight(std::span<const std::uint8_t> q, std::int64_t K,
                                            std::int64_t N, int bits) {
  const int pack = 32 / bits;
  check((bits == 4 || bits == 8) && K % pack == 0 && static_cast<std::int64_t>(q.size()) == K * N,
        ErrorKind::invalid_input, "pack_gptq_qweight", "bad shape or bits");
  std::vector<std::uint32_t> w(static_cast<std::size_t>(K / pack * N), 0);
  for (std::int64_t r = 0; r < K / pack; ++r)
    for (int i = 0; i < pack; ++i)
      for (std::int64_t n = 0; n < N; ++n)
        w[static_cast<std::size_t>(r * N + n)] |=
            static_cast<std::uint32_t>(q[static_cast<std::size_t>((pack * r + i) * N + n)])
            << (bits * i);
  return {w.begin(), w.end()};
}

std::vector<std::int32_t> pack_gptq_qzeros(std::span<const std::uint8_t> z, std::int64_t G,
                                           std::int64_t N, int bits, int offset) {
  const int pack = 32 / bits;
  check((bits == 4 || bits == 8) && N % pack == 0 && static_cast<std::int64_t>(z.size()) == G * N,
        ErrorKind::invalid_input, "pack_gptq_qzeros", "bad shape or bits");
  std::vector<std::uint32_t> w(static_cast<std::size_t>(G * N / pack), 0);
  for (std::int64_t g = 0; g < G; ++g)
    for (std::int64_t c = 0; c < N / pack; ++c)
      for (int i = 0; i < pack; ++i) {
        const int stored = z[static_cast<std::size_t>(g * N + pack * c + i)] - offset;
        check(stored >= 0 && stored < (1 << bits), ErrorKind::invalid_input, "pack_gptq_qzeros",
              "zero ", stored + offset, " does not fit with offset ", offset);
        w[static_cast<std::size_t>(g * (N / pack) + c)] |= static_cast<std::uint32_t>(stored)
                                                           << (bits * i);
      }
  return {w.begin(), w.end()};
}

std::vector<std::int32_t> pack_awq_rows(std::span<const std::uint8_t> v, std::int64_t rows,
                                        std::int64_t N) {
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  check(N % 8 == 0 && static_cast<std::int64_t>(v.size()) == rows * N, ErrorKind::invalid_input,
        "pack_awq_rows", "bad shape");
  std::vector<std::uint32_t> w(static_cast<std::size_t>(rows * N / 8), 0);
  for (std::int64_t k = 0; k < rows; ++k)
    for (std::int64_t c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i)
        w[static_cast<std::size_t>(k * (N / 8) + c)] |=
            static_cast<std::uint32_t>(v[static_cast<std::size_t>(k * N + 8 * c + kOrder[i])] & 0xF)
            << (4 * i);
  return {w.begin(), w.end()};
}

} // namespace tpullm::frontend
