// GPTQ and AWQ weights of the shared quantized checkpoints, repacked into the kernel layout:
// the packed weights must dequantize to exactly the values the checkpoint encodes, element for
// element, read here straight from the on-disk bit layout (independently of quant_repack).
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <filesystem>

#include "tpullm/conversion/quant_repack.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/kernels/packed_weights.hpp"

using namespace tpullm;

namespace {

std::filesystem::path model(const char* name) {
  return std::filesystem::path(TPULLM_TEST_DATA_DIR) / "models" / name;
}

/// W[k][n] straight from the checkpoint tensors, following the documented on-disk layouts.
float on_disk_value(const frontend::QuantizedWeight& q, const std::vector<std::int32_t>& qw,
                    const std::vector<std::int32_t>& qz, const std::vector<float>& scales,
                    const std::vector<std::int32_t>& g_idx, std::int64_t k, std::int64_t n) {
  const std::int64_t N = q.out_features;
  const std::int64_t g = g_idx.empty() ? k / q.group_size : g_idx[static_cast<std::size_t>(k)];
  auto nib = [](std::int32_t w, std::int64_t i) {
    return static_cast<int>((static_cast<std::uint32_t>(w) >> (4 * i)) & 0xF);
  };
  int qv = 0, zv = 0;
  if (q.format == frontend::QuantFormat::gptq) {
    qv = nib(qw[static_cast<std::size_t>((k / 8) * N + n)], k % 8);
    zv = nib(qz[static_cast<std::size_t>(g * (N / 8) + n / 8)], n % 8) + q.zero_offset;
  } else {
    // AWQ: nibble i of word c holds column 8c + order[i].
    static constexpr int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    int slot = 0;
    while (order[slot] != n % 8)
      ++slot;
    qv = nib(qw[static_cast<std::size_t>(k * (N / 8) + n / 8)], slot);
    zv = nib(qz[static_cast<std::size_t>(g * (N / 8) + n / 8)], slot);
  }
  return static_cast<float>(qv - zv) * scales[static_cast<std::size_t>(g * N + n)];
}

void check_linear(const frontend::QuantizedWeight& q) {
  INFO(q.qweight.where());
  const auto qw = q.qweight.to_i32();
  const auto qz = q.qzeros->to_i32();
  const auto scales = q.scales.to_f32();
  const std::vector<std::int32_t> g_idx = q.g_idx ? q.g_idx->to_i32() : std::vector<std::int32_t>{};
  std::vector<std::uint16_t> scale_bits(scales.size());
  for (std::size_t i = 0; i < scales.size(); ++i)
    scale_bits[i] = f32_to_f16(scales[i]); // f16 on disk: exact round trip
  const std::int64_t K = q.in_features, N = q.out_features;
  const conversion::QuantPlain plain =
      q.format == frontend::QuantFormat::gptq
          ? conversion::unpack_gptq(qw, qz, scale_bits, g_idx, K, N, q.group_size, q.zero_offset)
          : conversion::unpack_awq(qw, qz, scale_bits, K, N, q.group_size);
  const auto packed = conversion::repack_quant(plain);
  const auto from_packed = kernels::dequantize(packed);
  const auto from_plain = plain.dequantize();
  REQUIRE(from_packed.size() == static_cast<std::size_t>(K * N));
  std::int64_t mismatches = 0;
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n) {
      const float want = on_disk_value(q, qw, qz, scales, g_idx, k, n);
      const auto i = static_cast<std::size_t>(k * N + n);
      mismatches += (from_packed[i] != want || from_plain[i] != want) ? 1 : 0;
    }
  CHECK(mismatches == 0);
}

void check_model(const char* name) {
  const auto d = frontend::load_model(model(name));
  int linears = 0;
  for (const auto& layer : d.layers)
    for (const auto* w :
         {&layer.q, &layer.k, &layer.v, &layer.o, &layer.gate, &layer.up, &layer.down}) {
      REQUIRE(w->is_quantized());
      check_linear(w->quantized());
      ++linears;
    }
  CHECK(linears == 7 * d.dims.layers);
}

} // namespace

TEST_CASE("GPTQ checkpoint repacks to exactly its on-disk values",
          "[kernels][repack][checkpoint]") {
  check_model("llama-gqa-gptq-g32");
}

TEST_CASE("AWQ checkpoint repacks to exactly its on-disk values", "[kernels][repack][checkpoint]") {
  check_model("qwen2-tied-bias-awq-g32");
}
