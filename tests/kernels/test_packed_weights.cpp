// Packed weight layouts: exact byte positions, pack -> dequantize round trips, argument checks.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tpullm/kernels/packed_weights.hpp"

#include "error_kind.hpp"

using namespace tpullm;
using namespace tpullm::kernels;

TEST_CASE("packed layouts put every element at its documented byte", "[packed]") {
  const std::int64_t K = 3, N = 37; // two panels, the second one padded
  SECTION("f32: [P][K][32] f32") {
    std::vector<float> w(K * N);
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = float(i) + 0.5f;
    const auto p = pack_f32(w, K, N);
    REQUIRE(p.data.size() == std::size_t(2 * K * 128));
    float v;
    std::memcpy(&v, p.data.data() + (1 * K + 2) * 128 + 4 * 4, 4); // k=2, n=36
    CHECK(v == w[2 * N + 36]);
    std::memcpy(&v, p.data.data() + (1 * K + 2) * 128 + 4 * 5, 4); // padding
    CHECK(v == 0.0f);
    CHECK(dequantize(p) == w);
  }
  SECTION("bf16: word j = (col j | col j+16 << 16)") {
    std::vector<std::uint16_t> w(K * N);
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = f32_to_bf16(float(i));
    const auto p = pack_bf16(w, K, N);
    std::uint32_t word;
    std::memcpy(&word, p.data.data() + (0 * K + 1) * 64 + 4 * 3, 4); // k=1, words for cols 3, 19
    CHECK((word & 0xFFFF) == w[1 * N + 3]);
    CHECK((word >> 16) == w[1 * N + 19]);
    const auto d = dequantize(p);
    for (std::size_t i = 0; i < w.size(); ++i)
      REQUIRE(d[i] == bf16_to_f32(w[i]));
  }
  SECTION("f16: natural column order") {
    std::vector<std::uint16_t> w(K * N);
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = f32_to_f16(float(i) * 0.25f);
    const auto p = pack_f16(w, K, N);
    std::uint16_t h;
    std::memcpy(&h, p.data.data() + (1 * K + 0) * 64 + 2 * 3, 2); // k=0, n=35
    CHECK(h == w[35]);
    const auto d = dequantize(p);
    for (std::size_t i = 0; i < w.size(); ++i)
      REQUIRE(d[i] == f16_to_f32(w[i]));
  }
  SECTION("int8 group-wise and per-channel") {
    const std::int64_t K8 = 8; // two quads, two groups of 4
    std::vector<std::int8_t> q(K8 * N);
    for (std::size_t i = 0; i < q.size(); ++i)
      q[i] = static_cast<std::int8_t>(int(i % 255) - 127);
    std::vector<float> s2(2 * N), s1(N);
    for (std::int64_t n = 0; n < N; ++n) {
      s2[n] = 0.5f + n;
      s2[N + n] = -0.25f - n;
      s1[n] = 0.125f * (n + 1);
    }
    const auto p = pack_int8(q, s2, K8, N, 4);
    CHECK(p.groups() == 2);
    // quad layout: word c of the quad holds column c, byte j = row 4t + j (panel 1, quad 1)
    CHECK(static_cast<std::int8_t>(p.data[(1 * K8 + 4) * 32 + 4 * 4 + 3]) == q[7 * N + 36]);
    CHECK(p.scales[(1 * 2 + 1) * 32 + 4] == s2[N + 36]); // [P][G][32]
    const auto d = dequantize(p);
    for (std::int64_t k = 0; k < K8; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        REQUIRE(d[k * N + n] == float(q[k * N + n]) * s2[(k / 4) * N + n]);
    const auto pc = pack_int8_per_channel(q, s1, K8, N);
    CHECK(pc.group_size == K8);
    const auto dc = dequantize(pc);
    for (std::int64_t k = 0; k < K8; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        REQUIRE(dc[k * N + n] == float(q[k * N + n]) * s1[n]);
  }
  SECTION("int4: octets; word c byte j = row 8t+j (low nibble) | row 8t+4+j (high nibble)") {
    const std::int64_t K4 = 16, G4 = 2; // two octets, group 8
    std::vector<std::uint8_t> u(K4 * N), z(G4 * N);
    std::vector<float> s(G4 * N);
    for (std::size_t i = 0; i < u.size(); ++i)
      u[i] = static_cast<std::uint8_t>((i * 7) % 16);
    for (std::size_t i = 0; i < z.size(); ++i) {
      z[i] = static_cast<std::uint8_t>(i % 16);
      s[i] = 0.01f * float(i + 1);
    }
    const auto pa = pack_int4_asym(u, s, z, K4, N, 8);
    // panel 1, octet 1 (rows 8..15), column 36 = word 4: byte 2 holds rows 10 (low) and 14 (high)
    const std::uint8_t b = pa.data[(1 * K4 + 8) * 16 + 4 * 4 + 2];
    CHECK((b & 0xF) == u[10 * N + 36]);
    CHECK((b >> 4) == u[14 * N + 36]);
    CHECK(pa.zeros[(1 * G4 + 1) * 32 + 4] == z[1 * N + 36]); // [P][G][32]
    const auto d = dequantize(pa);
    for (std::int64_t k = 0; k < K4; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        REQUIRE(d[k * N + n] ==
                (float(u[k * N + n]) - float(z[(k / 8) * N + n])) * s[(k / 8) * N + n]);
    std::vector<std::int8_t> q(K4 * N);
    for (std::size_t i = 0; i < q.size(); ++i)
      q[i] = static_cast<std::int8_t>(int(u[i]) - 8);
    const auto ps = pack_int4_sym(q, s, K4, N, 8);
    CHECK(ps.zeros.empty());
    CHECK(ps.data[(1 * K4 + 8) * 16 + 4 * 4 + 2] == b); // sym stores q + 8
    const auto ds = dequantize(ps);
    for (std::int64_t k = 0; k < K4; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        REQUIRE(ds[k * N + n] == float(q[k * N + n]) * s[(k / 8) * N + n]);
    // act-order: packed row j holds original row perm[j]
    std::vector<std::int32_t> perm(K4);
    for (std::int64_t j = 0; j < K4; ++j)
      perm[j] = static_cast<std::int32_t>((j * 5 + 3) % K4);
    std::vector<std::int8_t> qp(K4 * N);
    for (std::int64_t j = 0; j < K4; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        qp[j * N + n] = q[perm[j] * N + n];
    const auto pp = pack_int4_sym(qp, s, K4, N, 8, perm);
    const auto dp = dequantize(pp);
    for (std::int64_t j = 0; j < K4; ++j)
      for (std::int64_t n = 0; n < N; ++n)
        REQUIRE(dp[perm[j] * N + n] == float(qp[j * N + n]) * s[(j / 8) * N + n]);
  }
  SECTION("int6_sym: 16-row blocks of two nibble octets and a 2-bit plane, codes q + 32") {
    const std::int64_t K6 = 40; // K padded to 48 (three blocks), per-channel and g16
    std::vector<std::int8_t> q(K6 * N);
    for (std::size_t i = 0; i < q.size(); ++i)
      q[i] = static_cast<std::int8_t>(static_cast<int>((i * 29 + 7) % 64) - 32);
    std::vector<float> s(N);
    for (std::int64_t n = 0; n < N; ++n)
      s[n] = 0.25f * float(n + 1);
    const auto p = pack_int6_sym(q, s, K6, N, K6);
    CHECK(p.format == WeightFormat::int6_sym);
    CHECK(p.stored_rows() == 48);
    CHECK(p.data.size() == static_cast<std::size_t>(p.panels() * 48 * 24));
    // panel 1, block 1 (rows 16..31), column 36 = word 4. Row 27 = 16 + 11: octet 1 (rows
    // 24..31), byte 3, low nibble (row 31 is its high one); its high bits in plane byte 3
    // (row 27 % 4), pair 11 / 4 = 2.
    const std::uint8_t* blk = p.data.data() + (1 * 48 + 16) * 24;
    const int u = q[27 * N + 36] + 32;
    CHECK((blk[128 + 4 * 4 + 3] & 15) == (u & 15));
    CHECK((blk[128 + 4 * 4 + 3] >> 4) == ((q[31 * N + 36] + 32) & 15));
    CHECK(((blk[256 + 4 * 4 + 3] >> 6) & 3) == ((q[31 * N + 36] + 32) >> 4));
    CHECK(((blk[256 + 4 * 4 + 3] >> 4) & 3) == (u >> 4));
    // row 16 = block row 0: octet 0, byte 0, low nibble; plane byte 0, pair 0
    const int u0 = q[16 * N + 36] + 32;
    CHECK((blk[4 * 4] & 15) == (u0 & 15));
    CHECK((blk[256 + 4 * 4] & 3) == (u0 >> 4));
    // padding rows 40..47 hold code 0
    CHECK(p.data[(1 * 48 + 32) * 24 + 128 + 4 * 4 + 0] == 0);
    const auto d = dequantize(p);
    for (std::int64_t k = 0; k < K6; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        REQUIRE(d[k * N + n] == float(q[k * N + n]) * s[n]);
    std::vector<std::int8_t> q32(32 * N);
    std::copy(q.begin(), q.begin() + 32 * N, q32.begin());
    std::vector<float> s3(2 * N, 0.5f);
    const auto pg = pack_int6_sym(q32, s3, 32, N, 16);
    CHECK(pg.groups() == 2);
    CHECK(dequantize(pg)[31 * N + 36] == float(q32[31 * N + 36]) * 0.5f);
    std::vector<std::int8_t> bad(q.begin(), q.end());
    bad[5] = 32; // outside [-32, 31]
    CHECK_THROWS_KIND(pack_int6_sym(bad, s, K6, N, K6), invalid_input);
    CHECK_THROWS_KIND(pack_int6_sym(q32, s3, 32, N, 8), invalid_input); // group % 16 != 0
  }
  SECTION("int6_min: int6_sym's blocks holding codes as given, scales and mins [P][G][32]") {
    const std::int64_t K6 = 32, G6 = 2; // two blocks, two groups of 16
    std::vector<std::uint8_t> u(K6 * N);
    for (std::size_t i = 0; i < u.size(); ++i)
      u[i] = static_cast<std::uint8_t>((i * 29 + 7) % 64);
    std::vector<float> s(G6 * N), m(G6 * N);
    for (std::size_t i = 0; i < s.size(); ++i) {
      s[i] = 0.25f * float(i + 1);
      m[i] = 0.5f * float(i) - 3.0f;
    }
    const auto p = pack_int6_min(u, s, m, K6, N, 16);
    CHECK(p.format == WeightFormat::int6_min);
    CHECK(p.stored_rows() == 32);
    // panel 1, block 1 (rows 16..31), column 36 = word 4: row 27 as in int6_sym, unshifted
    const std::uint8_t* blk = p.data.data() + (1 * 32 + 16) * 24;
    const int c = u[27 * N + 36];
    CHECK((blk[128 + 4 * 4 + 3] & 15) == (c & 15));
    CHECK(((blk[256 + 4 * 4 + 3] >> 4) & 3) == (c >> 4));
    CHECK(p.scales[(1 * G6 + 1) * 32 + 4] == s[1 * N + 36]);
    CHECK(p.mins[(1 * G6 + 1) * 32 + 4] == m[1 * N + 36]);
    const auto d = dequantize(p);
    for (std::int64_t k = 0; k < K6; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        REQUIRE(d[k * N + n] == float(u[k * N + n]) * s[(k / 16) * N + n] - m[(k / 16) * N + n]);
    std::vector<std::uint8_t> bad(u.begin(), u.end());
    bad[5] = 64; // outside [0, 63]
    CHECK_THROWS_KIND(pack_int6_min(bad, s, m, K6, N, 16), invalid_input);
    CHECK_THROWS_KIND(pack_int6_min(u, s, m, K6, N, 8), invalid_input); // group % 16 != 0
  }
  SECTION("int8_asym: the int8 quads holding unsigned codes, zeros [P][G][32]") {
    const std::int64_t K8 = 8, G8 = 2; // two quads, group 4
    std::vector<std::uint8_t> u(K8 * N), z(G8 * N);
    std::vector<float> s(G8 * N);
    for (std::size_t i = 0; i < u.size(); ++i)
      u[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
    for (std::size_t i = 0; i < z.size(); ++i) {
      z[i] = static_cast<std::uint8_t>((i * 53) % 256);
      s[i] = 0.01f * float(i + 1);
    }
    const auto p = pack_int8_asym(u, s, z, K8, N, 4);
    CHECK(p.format == WeightFormat::int8_asym);
    // panel 1, quad 1 (rows 4..7), column 36 = word 4: byte 3 is row 7, stored unflipped
    CHECK(p.data[(1 * K8 + 4) * 32 + 4 * 4 + 3] == u[7 * N + 36]);
    CHECK(p.zeros[(1 * G8 + 1) * 32 + 4] == z[1 * N + 36]);
    CHECK(p.scales[(1 * G8 + 1) * 32 + 4] == s[1 * N + 36]);
    const auto d = dequantize(p);
    for (std::int64_t k = 0; k < K8; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        REQUIRE(d[k * N + n] ==
                (float(u[k * N + n]) - float(z[(k / 4) * N + n])) * s[(k / 4) * N + n]);
  }
  SECTION("int4_min / int8_min: int4 octets / int8 quads, f32 mins [P][G][32], w = u s - m") {
    const std::int64_t K = 32, G = 2; // groups of 16 rows (ggml's Q2_K)
    std::vector<std::uint8_t> u4(K * N), u8(K * N);
    std::vector<float> s(G * N), m(G * N);
    for (std::size_t i = 0; i < u4.size(); ++i) {
      u4[i] = static_cast<std::uint8_t>((i * 7) % 16);
      u8[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
    }
    for (std::size_t i = 0; i < s.size(); ++i) {
      s[i] = 0.0625f * float(i % 13 + 1); // u * s exact in f32
      m[i] = -0.3f + 0.01f * float(i);
    }
    const auto p4 = pack_int4_min(u4, s, m, K, N, 16);
    CHECK(p4.format == WeightFormat::int4_min);
    CHECK(p4.zeros.empty());
    CHECK(p4.mins.size() == std::size_t(2 * G * 32));
    CHECK(p4.mins[(1 * G + 1) * 32 + 4] == m[1 * N + 36]); // [P][G][32]
    CHECK(p4.mins[(1 * G + 1) * 32 + 31] == 0.0f);         // column 63 is padding
    CHECK(p4.total_bytes() == std::int64_t(p4.data.size() + 2 * 4 * p4.scales.size()));
    // panel 1, octet 1 (rows 8..15), column 36 = word 4: byte 2 holds rows 10 (low) and 14 (high)
    const std::uint8_t b = p4.data[(1 * K + 8) * 16 + 4 * 4 + 2];
    CHECK((b & 0xF) == u4[10 * N + 36]);
    CHECK((b >> 4) == u4[14 * N + 36]);
    const auto p8 = pack_int8_min(u8, s, m, K, N, 16);
    CHECK(p8.format == WeightFormat::int8_min);
    CHECK(p8.data[(1 * K + 4) * 32 + 4 * 4 + 3] == u8[7 * N + 36]); // quad 1, row 7
    const auto d4 = dequantize(p4), d8 = dequantize(p8);
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n) {
        const std::size_t i = static_cast<std::size_t>(k * N + n);
        const std::size_t g = static_cast<std::size_t>((k / 16) * N + n);
        REQUIRE(d4[i] == float(u4[i]) * s[g] - m[g]);
        REQUIRE(d8[i] == float(u8[i]) * s[g] - m[g]);
      }
    CHECK(format_name(WeightFormat::int4_min) == "int4_min");
    CHECK(format_name(WeightFormat::int8_min) == "int8_min");
    CHECK(has_mins(WeightFormat::int8_min));
    CHECK(!has_mins(WeightFormat::int8_asym));
    CHECK(!has_zeros(WeightFormat::int4_min));
    CHECK(is_quantized(WeightFormat::int4_min));
    CHECK(row_group(WeightFormat::int4_min) == 8);
    CHECK(row_group(WeightFormat::int8_min) == 4);
  }
  SECTION("odd K is padded to the row group with zero rows") {
    std::vector<std::int8_t> q(5 * N, 3);
    std::vector<float> sc(N, 0.5f);
    const auto p = pack_int8_per_channel(q, sc, 5, N);
    CHECK(p.stored_rows() == 8);
    CHECK(p.data.size() == std::size_t(2 * 8 * 32));
    CHECK(p.data[128 + 4 * 5 + 0] == 3); // quad 1 (rows 4..7), column 5: row 4 is real
    CHECK(p.data[128 + 4 * 5 + 1] == 0); // rows 5..7 are padding
    CHECK(p.data[128 + 4 * 5 + 3] == 0);
  }
}

TEST_CASE("pack functions reject bad arguments", "[packed]") {
  std::vector<std::int8_t> q(6 * 4, 0);
  std::vector<float> s(4, 1.0f);
  CHECK_THROWS_KIND(pack_int8(q, s, 6, 4, 4), invalid_input); // K % group
  CHECK_THROWS_KIND(pack_int8(q, s, 6, 4, 0), invalid_input); // group 0
  CHECK_THROWS_KIND(pack_int8(q, s, 5, 4, 5), invalid_input); // size mismatch
  CHECK_THROWS_KIND(pack_int4_sym(q, s, 6, 4, 4), invalid_input);
  std::vector<std::int8_t> q12(12 * 4, 0);
  std::vector<float> s3(3 * 4, 1.0f);
  CHECK_THROWS_KIND(pack_int4_sym(q12, s3, 12, 4, 4), invalid_input); // group % 8 != 0
  CHECK_NOTHROW(pack_int8(q12, s3, 12, 4, 4));
  std::vector<float> s6(6 * 4, 1.0f);
  CHECK_THROWS_KIND(pack_int8(q12, s6, 12, 4, 2), invalid_input); // group % 4 != 0
  std::vector<std::int8_t> big(6 * 4, 9);
  CHECK_THROWS_KIND(pack_int4_sym(big, s, 6, 4, 6), invalid_input); // value > 7
  std::vector<std::uint8_t> u(6 * 4, 3), z(4, 16);
  CHECK_THROWS_KIND(pack_int4_asym(u, s, z, 6, 4, 6), invalid_input); // zero > 15
  std::vector<std::uint8_t> z_ok(4, 1);
  const std::vector<std::int32_t> bad_perm = {0, 1, 2, 3, 4, 4};
  CHECK_THROWS_KIND(pack_int4_asym(u, s, z_ok, 6, 4, 6, bad_perm), invalid_input);
  std::vector<float> w(3);
  CHECK_THROWS_KIND(pack_f32(w, 0, 3), invalid_input);
  std::vector<std::uint8_t> u16(6 * 4, 16);
  CHECK_THROWS_KIND(pack_int4_min(u16, s, s, 6, 4, 6), invalid_input); // code > 15
  CHECK_THROWS_KIND(pack_int4_min(u, s, s3, 6, 4, 6), invalid_input);  // mins size
  CHECK_THROWS_KIND(pack_int4_min(u, s, s, 6, 4, 6, bad_perm), invalid_input);
  CHECK_NOTHROW(pack_int4_min(u, s, s, 6, 4, 6));
  std::vector<std::uint8_t> u12(12 * 4, 200);
  CHECK_THROWS_KIND(pack_int8_min(u12, s6, s6, 12, 4, 2), invalid_input); // group % 4
  CHECK_THROWS_KIND(pack_int8_min(u12, s3, s, 12, 4, 4), invalid_input);  // mins size
  CHECK_NOTHROW(pack_int8_min(u12, s3, s3, 12, 4, 4));
}
