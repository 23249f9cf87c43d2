// ggml block decoders (conversion/ggml_blocks.hpp) against ggml's own C code: tests/data/ggml
// holds rows quantized by ggml's quantizers (and rows llama-quantize wrote into the shared GGUF
// cases) with ggml's dequantize_row_* output beside them (scripts/gen-ggml-fixtures.sh), and
// ggml's table of type ids and block sizes. Every comparison is bit for bit.
#include <catch2/catch.hpp>

#include <bit>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tpullm/conversion/ggml_blocks.hpp"
#include "tpullm/conversion/ggml_types.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/float16.hpp"

#include "test_data_dir.hpp"

namespace ggml_blocks_test {

using namespace tpullm;
using namespace tpullm::conversion;

std::filesystem::path data_dir() {
  return std::filesystem::path(TPULLM_TEST_DATA_DIR) / "ggml";
}

std::vector<std::byte> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f.good());
  const std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

std::vector<float> read_f32(const std::filesystem::path& p) {
  const std::vector<std::byte> b = read_bytes(p);
  REQUIRE(b.size() % 4 == 0);
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), b.size());
  return f;
}

std::string upper(std::string s) {
  for (char& c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

/// The type ggml names `name` (ggml spells "q4_K", the table "Q4_K").
std::optional<GgmlType> type_named(const std::string& name) {
  for (const auto& t : kGgmlTypes)
    if (t.name == upper(name))
      return t.type;
  return std::nullopt;
}

/// Index of the first element whose bits differ, or -1.
std::int64_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]))
      return static_cast<std::int64_t>(i);
  return -1;
}

struct Fixture {
  std::string name;
  GgmlType type;
  std::int64_t K, rows;
  std::string source;
};

std::vector<Fixture> fixtures() {
  std::ifstream f(data_dir() / "fixtures.txt");
  REQUIRE(f.good());
  std::vector<Fixture> out;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string name, type, source;
    std::int64_t K = 0, rows = 0;
    REQUIRE(static_cast<bool>(is >> name >> type >> K >> rows >> source));
    const std::optional<GgmlType> t = type_named(type);
    REQUIRE(t.has_value());
    out.push_back({name, *t, K, rows, source});
  }
  return out;
}

/// What ggml_blocks.hpp says each type becomes: bits, group, scale-and-min or symmetric.
struct Expect {
  int bits;
  std::int64_t group;
  bool min;
};

/// The containers ggml_blocks.hpp names, type by type.
constexpr std::pair<GgmlType, Expect> kExpected[] = {
    {GgmlType::q4_0, {4, 32, false}},   {GgmlType::q3_k, {4, 16, false}},
    {GgmlType::q2_k, {4, 16, true}},    {GgmlType::q4_1, {4, 32, true}},
    {GgmlType::q4_k, {4, 32, true}},    {GgmlType::q8_0, {8, 32, false}},
    {GgmlType::q5_0, {6, 32, false}},   {GgmlType::q6_k, {6, 16, false}},
    {GgmlType::iq4_nl, {8, 32, false}}, {GgmlType::iq4_xs, {8, 32, false}},
    {GgmlType::q5_1, {6, 32, true}},    {GgmlType::q5_k, {6, 32, true}},
};

Expect expected_container(GgmlType t) {
  for (const auto& [type, e] : kExpected)
    if (type == t)
      return e;
  FAIL("no container for " << ggml_name(t));
  return {};
}

void require_error(ErrorKind kind, const std::string& needle, const auto& fn) {
  try {
    fn();
    FAIL("no error, expected one containing '" << needle << "'");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.kind() == kind);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
}

TEST_CASE("the ggml type table matches ggml's ids, names and block sizes", "[ggml]") {
  std::ifstream f(data_dir() / "types.txt");
  REQUIRE(f.good());
  std::size_t rows = 0;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::uint32_t id = 0;
    std::string name;
    std::int64_t elems = 0, bytes = 0;
    REQUIRE(static_cast<bool>(is >> id >> name >> elems >> bytes));
    INFO("ggml type " << id << " " << name);
    const std::optional<GgmlTypeInfo> t = ggml_type_info(id);
    REQUIRE(t.has_value());
    CHECK(t->name == upper(name));
    CHECK(t->block_elems == elems);
    CHECK(t->block_bytes == bytes);
    ++rows;
  }
  // Every id of the table is one ggml defines (ggml lists each of its types once).
  CHECK(rows == std::size(kGgmlTypes));
}

TEST_CASE("dequantize_ggml and decode_ggml_rows equal ggml's dequantization bit for bit",
          "[ggml]") {
  const std::vector<Fixture> all = fixtures();
  REQUIRE(all.size() >= 12);
  for (const Fixture& fx : all) {
    INFO(fx.name << " (" << ggml_name(fx.type) << ", K " << fx.K << ", rows " << fx.rows << ", "
                 << fx.source << ")");
    const std::vector<std::byte> blocks = read_bytes(data_dir() / (fx.name + ".blk"));
    const std::vector<float> want = read_f32(data_dir() / (fx.name + ".f32"));
    REQUIRE(want.size() == static_cast<std::size_t>(fx.K * fx.rows));

    CHECK(first_bit_difference(dequantize_ggml(fx.type, blocks, fx.K * fx.rows), want) == -1);

    const QuantPlain p = decode_ggml_rows(fx.type, blocks, fx.K, fx.rows);
    const Expect e = expected_container(fx.type);
    CHECK(ggml_packing(fx.type).bits == e.bits);
    CHECK(ggml_packing(fx.type).group_size == e.group);
    CHECK(ggml_packing(fx.type).has_mins == e.min);
    CHECK(p.K == fx.K);
    CHECK(p.N == fx.rows);
    CHECK(p.bits == e.bits);
    CHECK(p.group_size == e.group);
    const auto GN = static_cast<std::size_t>(fx.K / e.group * fx.rows);
    REQUIRE(p.q.size() == static_cast<std::size_t>(fx.K * fx.rows));
    REQUIRE(p.scales.size() == GN);
    REQUIRE(p.g_idx.size() == static_cast<std::size_t>(fx.K));
    for (std::int64_t k = 0; k < fx.K; ++k)
      REQUIRE(p.g_idx[static_cast<std::size_t>(k)] == k / e.group);
    if (e.min) {
      CHECK(p.zeros.empty());
      CHECK(p.mins.size() == GN);
    } else {
      CHECK(p.mins.empty());
      CHECK(p.zeros == std::vector<std::uint8_t>(GN, static_cast<std::uint8_t>(1 << (e.bits - 1))));
    }
    // What the bytes pack to is the format ggml_packing names (the lowering of a weight given
    // as types only relies on it), and its group.
    const kernels::PackedWeights packed = repack_quant(p);
    CHECK(packed.format == ggml_packing(fx.type).format());
    CHECK(packed.group_size == e.group);
    // The K-quants and IQ4_XS keep their scales in two levels, as the file does: an int8 code
    // per group and an f32 per 256 elements (Q4_K: 4 + 16 / 32 + 64 / 256 = 4.75 bits a weight).
    const bool two = ggml_info(fx.type).block_elems == 256;
    CHECK(ggml_packing(fx.type).super_rows == (two ? 256 : 0));
    CHECK(packed.two_level() == two);
    if (two) {
      const std::int64_t Np = packed.panels() * 32, G = fx.K / e.group, S = fx.K / 256;
      const std::int64_t params = e.min ? 2 : 1;
      CHECK(packed.total_bytes() ==
            static_cast<std::int64_t>(packed.data.size()) + params * Np * (G + 4 * S));
    }
    bool codes_in_range = true;
    for (std::uint8_t q : p.q)
      codes_in_range = codes_in_range && q < (1u << e.bits);
    CHECK(codes_in_range);

    // W [K, N] with W[k][n] = element k of row n.
    const std::vector<float> w = p.dequantize();
    std::vector<float> rows(w.size());
    for (std::int64_t k = 0; k < fx.K; ++k)
      for (std::int64_t n = 0; n < fx.rows; ++n)
        rows[static_cast<std::size_t>(n * fx.K + k)] = w[static_cast<std::size_t>(k * fx.rows + n)];
    CHECK(first_bit_difference(rows, want) == -1);
    // and the packed container holds the same values (its codes, scales and mins or zeros)
    CHECK(first_bit_difference(kernels::dequantize(packed), w) == -1);
  }
}

TEST_CASE("a tile boundary of decode_ggml_rows keeps every row in its column", "[ggml]") {
  // 12 fixture rows repeated to 37 rows (more than two tiles of 16, and a partial one).
  const std::vector<std::byte> blocks = read_bytes(data_dir() / "q4_k.blk");
  const std::vector<float> want = read_f32(data_dir() / "q4_k.f32");
  const std::int64_t K = 768, src_rows = 12, N = 37, row_bytes = *ggml_row_bytes(GgmlType::q4_k, K);
  std::vector<std::byte> big;
  std::vector<float> big_want;
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int64_t r = (n * 5) % src_rows;
    big.insert(big.end(), blocks.begin() + r * row_bytes, blocks.begin() + (r + 1) * row_bytes);
    big_want.insert(big_want.end(), want.begin() + r * K, want.begin() + (r + 1) * K);
  }
  const std::vector<float> w = decode_ggml_rows(GgmlType::q4_k, big, K, N).dequantize();
  std::vector<float> rows(w.size());
  for (std::int64_t k = 0; k < K; ++k)
    for (std::int64_t n = 0; n < N; ++n)
      rows[static_cast<std::size_t>(n * K + k)] = w[static_cast<std::size_t>(k * N + n)];
  CHECK(first_bit_difference(rows, big_want) == -1);
}

TEST_CASE("dequantize_ggml widens the float types exactly", "[ggml]") {
  const std::vector<float> v = {1.5f, -0.0f, 65504.0f, 5.960464477539063e-08f, -3.25f};
  std::vector<std::byte> f32(v.size() * 4), f16(v.size() * 2), bf16(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint32_t b = std::bit_cast<std::uint32_t>(v[i]);
    const std::uint16_t h = f32_to_f16(v[i]), g = f32_to_bf16(v[i]);
    for (int j = 0; j < 4; ++j)
      f32[i * 4 + static_cast<std::size_t>(j)] = static_cast<std::byte>(b >> (8 * j));
    f16[i * 2] = static_cast<std::byte>(h & 0xFF);
    f16[i * 2 + 1] = static_cast<std::byte>(h >> 8);
    bf16[i * 2] = static_cast<std::byte>(g & 0xFF);
    bf16[i * 2 + 1] = static_cast<std::byte>(g >> 8);
  }
  const auto n = static_cast<std::int64_t>(v.size());
  CHECK(first_bit_difference(dequantize_ggml(GgmlType::f32, f32, n), v) == -1);
  CHECK(first_bit_difference(dequantize_ggml(GgmlType::f16, f16, n), v) == -1);
  std::vector<float> vb(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    vb[i] = bf16_to_f32(f32_to_bf16(v[i]));
  CHECK(first_bit_difference(dequantize_ggml(GgmlType::bf16, bf16, n), vb) == -1);
}

TEST_CASE("ggml types that are not importable are refused by name", "[ggml]") {
  const std::vector<std::byte> none(1024);
  for (const auto& t : kGgmlTypes) {
    if (t.importable)
      continue;
    INFO(t.name);
    const std::int64_t K = t.block_elems * 4;
    const std::vector<std::byte> data(static_cast<std::size_t>(t.block_bytes * 4 * 2));
    require_error(ErrorKind::unsupported, std::string(t.name),
                  [&] { (void)decode_ggml_rows(t.type, data, K, 2); });
    require_error(ErrorKind::unsupported, std::string(t.name),
                  [&] { (void)dequantize_ggml(t.type, data, K * 2); });
  }
  // The float types are plain weights: decode_ggml_rows refuses them, naming the type.
  for (GgmlType t : {GgmlType::f32, GgmlType::f16, GgmlType::bf16})
    require_error(ErrorKind::unsupported, std::string(ggml_name(t)),
                  [&] { (void)decode_ggml_rows(t, none, 32, 2); });
}

TEST_CASE("decode_ggml_rows and dequantize_ggml refuse sizes that do not match", "[ggml]") {
  const std::vector<std::byte> blocks = read_bytes(data_dir() / "q6_k.blk"); // 12 rows of 768
  const std::span<const std::byte> all(blocks);
  CHECK_NOTHROW(decode_ggml_rows(GgmlType::q6_k, all, 768, 12));
  require_error(ErrorKind::invalid_input, "Q6_K", [&] {
    (void)decode_ggml_rows(GgmlType::q6_k, all.first(all.size() - 1), 768, 12);
  });
  require_error(ErrorKind::invalid_input, "bytes",
                [&] { (void)decode_ggml_rows(GgmlType::q6_k, all, 768, 11); });
  require_error(ErrorKind::invalid_input, "multiple of the block",
                [&] { (void)decode_ggml_rows(GgmlType::q6_k, all, 128, 12); });
  require_error(ErrorKind::invalid_input, "positive",
                [&] { (void)decode_ggml_rows(GgmlType::q6_k, all, 768, 0); });
  require_error(ErrorKind::invalid_input, "overflow",
                [&] { (void)decode_ggml_rows(GgmlType::q6_k, all, 768, std::int64_t{1} << 60); });
  require_error(ErrorKind::invalid_input, "bytes",
                [&] { (void)dequantize_ggml(GgmlType::q6_k, all, 768 * 13); });
  require_error(ErrorKind::invalid_input, "multiple of the block",
                [&] { (void)dequantize_ggml(GgmlType::q4_0, all.first(18), 31); });
}

} // namespace ggml_blocks_test
