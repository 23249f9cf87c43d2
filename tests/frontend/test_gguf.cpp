// The GGUF reader and writer (frontend/gguf.hpp, frontend/gguf_writer.hpp): round trips of every
// metadata value type and of tensors of several ggml types, the shared llama.cpp-written files
// (../shared/models-gguf, skipped when absent) against their goldens.json, and every class of bad
// input as its own case: each must be one tpullm::Error of one line, in bounded time.
#include "frontend_test_util.hpp"

#include "tpullm/frontend/gguf.hpp"
#include "tpullm/frontend/gguf_writer.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/utf8.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <set>

using namespace tpullm;
using namespace tpullm::frontend;
using Catch::Contains;
using conversion::GgmlType;

namespace gguf_test {

namespace fs = std::filesystem;

/// Bytes 0, 1, 2, ... (mod 251) as the stored data of a tensor: any bit pattern is a valid block.
std::vector<std::byte> pattern_bytes(std::size_t n, unsigned seed) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = static_cast<std::byte>((i * 7 + seed) % 251);
  return b;
}

std::size_t stored_bytes(GgmlType t, std::vector<std::int64_t> ne) {
  std::int64_t rows = 1;
  for (std::size_t i = 1; i < ne.size(); ++i)
    rows *= ne[i];
  return static_cast<std::size_t>(*conversion::ggml_row_bytes(t, ne[0]) * rows);
}

GgufFile parse_image(const std::vector<std::byte>& img, std::string source = "mem.gguf") {
  return GgufFile::parse(img, nullptr, std::move(source));
}

/// A small valid file: metadata of several types (one per value type, arrays, an array of
/// arrays) and three tensors (F32, Q4_0, Q4_K).
GgufWriter small_writer(fs::path path = {}) {
  GgufWriter w(std::move(path), OutputOptions{.fsync = false});
  w.set_string("general.architecture", "llama");
  w.set_string("general.nameX", "tiny");
  w.set_u8("t.u8", 200);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 60000);
  w.set_i16("t.i16", -30000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", 18000000000000000000ull);
  w.set_i64("t.i64", -9000000000000000000ll);
  w.set_f32("t.f32", 1.5f);
  w.set_f64("t.f64", -2.25);
  w.set_bool("t.bool", true);
  w.set_string_array("t.strs", {"a", "\xc3\xa9t\xc3\xa9", ""});
  w.set_array("t.u8s", GgufValueType::u8, {std::int64_t{1}, std::int64_t{255}});
  w.set_array("t.bools", GgufValueType::boolean, {true, false});
  GgufValue aa;
  aa.type = GgufValueType::array;
  aa.elem_type = GgufValueType::array;
  GgufValue inner;
  inner.type = GgufValueType::array;
  inner.elem_type = GgufValueType::i32;
  inner.array = {std::int64_t{-1}, std::int64_t{7}};
  aa.nested.push_back(inner);
  w.set("t.nested", aa);
  w.add_tensor("w.f32", GgmlType::f32, {8, 2}, pattern_bytes(64, 1));
  w.add_tensor("w.q4_0", GgmlType::q4_0, {64, 3},
               pattern_bytes(stored_bytes(GgmlType::q4_0, {64, 3}), 2));
  w.add_tensor("blk.0.w", GgmlType::q4_k, {256, 2},
               pattern_bytes(stored_bytes(GgmlType::q4_k, {256, 2}), 3));
  return w;
}

/// Position just after the stored string `s` (its u64 length and bytes) in `img`.
std::size_t after_string(const std::vector<std::byte>& img, std::string_view s) {
  std::string pat(8, '\0');
  const std::uint64_t n = s.size();
  std::memcpy(pat.data(), &n, 8);
  pat += s;
  const std::string_view hay(reinterpret_cast<const char*>(img.data()), img.size());
  const auto at = hay.find(pat);
  REQUIRE(at != std::string_view::npos);
  return at + pat.size();
}

template <class T>
void poke(std::vector<std::byte>& img, std::size_t at, T v) {
  REQUIRE(at + sizeof(T) <= img.size());
  std::memcpy(img.data() + at, &v, sizeof(T));
}

/// Field offsets of a tensor info (after its name): n_dims, ne[k], type, offset.
std::size_t tensor_ndims_at(const std::vector<std::byte>& img, std::string_view name) {
  return after_string(img, name);
}
std::size_t tensor_ne_at(const std::vector<std::byte>& img, std::string_view name, int k) {
  return after_string(img, name) + 4 + 8 * static_cast<std::size_t>(k);
}
std::size_t tensor_type_at(const std::vector<std::byte>& img, std::string_view name) {
  const std::size_t p = after_string(img, name);
  std::uint32_t nd = 0;
  std::memcpy(&nd, img.data() + p, 4);
  return p + 4 + 8 * nd;
}
std::size_t tensor_offset_at(const std::vector<std::byte>& img, std::string_view name) {
  return tensor_type_at(img, name) + 4;
}

/// Parses `img` expecting an Error of `kind` whose one-line message contains every `parts`.
void expect_refused(const std::vector<std::byte>& img, ErrorKind kind,
                    std::initializer_list<std::string_view> parts) {
  try {
    (void)parse_image(img);
    FAIL("parsed without an error");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.kind() == kind);
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find("mem.gguf") != std::string::npos);
    for (std::string_view p : parts)
      CHECK(what.find(p) != std::string::npos);
  }
}

/// A hand-made header: magic, version, counts.
std::vector<std::byte> raw_header(std::uint32_t version, std::uint64_t n_tensors,
                                  std::uint64_t n_kv) {
  std::vector<std::byte> img(24);
  std::memcpy(img.data(), "GGUF", 4);
  std::memcpy(img.data() + 4, &version, 4);
  std::memcpy(img.data() + 8, &n_tensors, 8);
  std::memcpy(img.data() + 16, &n_kv, 8);
  return img;
}

template <class T>
void append(std::vector<std::byte>& img, T v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  img.insert(img.end(), p, p + sizeof(T));
}
void append_str(std::vector<std::byte>& img, std::string_view s) {
  append<std::uint64_t>(img, s.size());
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  img.insert(img.end(), p, p + s.size());
}

/// Folders of llama.cpp-written cases (model.gguf + goldens.json): tests/data/models-gguf (five
/// small ones, always there) and $TPULLM_GGUF_MODELS, else ../shared/models-gguf beside the
/// repository, else /work/shared/models-gguf, when one exists (all six, with Qwen3's tokenizer).
std::vector<fs::path> gguf_case_roots() {
  std::vector<fs::path> roots = {fe_test::data_dir() / "models-gguf"};
  std::error_code ec;
  if (const char* e = std::getenv("TPULLM_GGUF_MODELS")) {
    roots.emplace_back(e);
    return roots;
  }
  for (fs::path p : {fe_test::data_dir() / ".." / ".." / ".." / "shared" / "models-gguf",
                     fs::path("/work/shared/models-gguf")})
    if (fs::is_directory(p, ec)) {
      roots.push_back(p);
      break;
    }
  return roots;
}

TEST_CASE("UTF-8 validation is strict", "[gguf][utf8]") {
  CHECK(is_valid_utf8(""));
  CHECK(is_valid_utf8("plain ascii"));
  CHECK(is_valid_utf8("\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80")); // é 中 😀
  CHECK(is_valid_utf8("\xf4\x8f\xbf\xbf"));                     // U+10FFFF
  CHECK(find_invalid_utf8("ab\xff") == std::optional<std::size_t>(2));
  CHECK_FALSE(is_valid_utf8("\x80"));             // stray continuation
  CHECK_FALSE(is_valid_utf8("\xc0\x80"));         // overlong NUL
  CHECK_FALSE(is_valid_utf8("\xe0\x80\xaf"));     // overlong '/'
  CHECK_FALSE(is_valid_utf8("\xed\xa0\x80"));     // surrogate U+D800
  CHECK_FALSE(is_valid_utf8("\xf4\x90\x80\x80")); // above U+10FFFF
  CHECK_FALSE(is_valid_utf8("\xe4\xb8"));         // truncated
  CHECK_FALSE(is_valid_utf8("\xc3("));            // bad continuation
}

TEST_CASE("GGUF writer -> reader round trip of every value type and tensors", "[gguf]") {
  fe_test::TempDir tmp;
  for (std::uint32_t version : {2u, 3u}) {
    for (std::uint64_t alignment : {32u, 1u, 64u, 4096u}) {
      CAPTURE(version, alignment);
      const fs::path path = tmp / "rt.gguf";
      GgufWriter w = small_writer(path);
      w.set_version(version);
      if (alignment != 32)
        w.set_alignment(alignment);
      const std::vector<std::byte> img = w.image();
      REQUIRE(img.size() % alignment == 0);
      w.finish();
      const std::string disk = fe_test::read_file(path);
      CHECK(disk.size() == img.size());
      CHECK(std::memcmp(disk.data(), img.data(), img.size()) == 0);
      CHECK(GgufFile::looks_like_gguf(path));
      for (FileAccess access : {FileAccess::map, FileAccess::read}) {
        const GgufFile f = GgufFile::open(path, access);
        CHECK(f.source() == path.string());
        CHECK(f.metadata().size() == (alignment != 32 ? 18u : 17u));
        REQUIRE(f.tensors().size() == 3);
        CHECK(f.tensors()[2].bytes.size() == 288);
        CHECK(f.tensors()[2].keepalive != nullptr);
      }

      const GgufFile g = parse_image(img);
      CHECK(g.version() == version);
      CHECK(g.alignment() == alignment);
      CHECK(g.get_string("general.architecture") == "llama");
      CHECK(g.get_int("t.u8") == 200);
      CHECK(g.get_int("t.i8") == -100);
      CHECK(g.get_int("t.u16") == 60000);
      CHECK(g.get_int("t.i16") == -30000);
      CHECK(g.get_int("t.u32") == 4000000000LL);
      CHECK(g.get_int("t.i32") == -2000000000);
      CHECK(std::get<std::uint64_t>(g.find("t.u64")->scalar) == 18000000000000000000ull);
      CHECK(g.get_int("t.i64") == -9000000000000000000LL);
      CHECK(g.get_float("t.f32") == 1.5);
      CHECK(g.get_float("t.f64") == -2.25);
      CHECK(g.get_bool("t.bool") == true);
      CHECK(g.find("t.f32")->type == GgufValueType::f32);
      CHECK(g.find("t.u16")->type == GgufValueType::u16);
      CHECK(g.get_string_array("t.strs") == std::vector<std::string>{"a", "\xc3\xa9t\xc3\xa9", ""});
      CHECK(g.get_int_array("t.u8s") == std::vector<std::int64_t>{1, 255});
      CHECK(g.find("t.u8s")->elem_type == GgufValueType::u8);
      CHECK(g.find("t.bools")->array == std::vector<GgufScalar>{true, false});
      const GgufValue* nested = g.find("t.nested");
      REQUIRE(nested);
      REQUIRE(nested->nested.size() == 1);
      CHECK(nested->elem_type == GgufValueType::array);
      CHECK(nested->nested[0].elem_type == GgufValueType::i32);
      CHECK(nested->nested[0].array == std::vector<GgufScalar>{std::int64_t{-1}, std::int64_t{7}});
      CHECK_FALSE(g.get_string("missing").has_value());

      REQUIRE(g.tensors().size() == 3);
      const GgufTensor* q = g.find_tensor("w.q4_0");
      REQUIRE(q);
      CHECK(q->type == GgmlType::q4_0);
      CHECK(q->ne == std::vector<std::int64_t>{64, 3});
      CHECK(q->rows() == 3);
      CHECK(q->numel() == 192);
      CHECK(q->bytes.size() == 3 * 2 * 18);
      CHECK(
          std::equal(q->bytes.begin(), q->bytes.end(), pattern_bytes(q->bytes.size(), 2).begin()));
      CHECK(q->offset % alignment == 0);
      CHECK(q->offset == w.tensor_offset(1));
      CHECK(static_cast<std::uint64_t>(q->bytes.data() - img.data()) == w.data_start() + q->offset);
      CHECK(q->where() == "mem.gguf: tensor 'w.q4_0'");
      const GgufTensor* k = g.find_tensor("blk.0.w");
      REQUIRE(k);
      CHECK(k->type == GgmlType::q4_k);
      CHECK(k->bytes.size() == 2 * 144);
      CHECK(
          std::equal(k->bytes.begin(), k->bytes.end(), pattern_bytes(k->bytes.size(), 3).begin()));
      CHECK(g.tensors()[0].name == "w.f32"); // file order
      CHECK(g.find_tensor("nope") == nullptr);
    }
  }
}

TEST_CASE("GGUF typed getters refuse another type naming the key", "[gguf]") {
  const auto img = small_writer().image();
  const GgufFile g = parse_image(img);
  REQUIRE_THROWS_WITH(g.get_string("t.u32"),
                      "invalid input: mem.gguf: key 't.u32': holds a u32, not a string");
  REQUIRE_THROWS_WITH(g.get_int("t.f32"), Contains("key 't.f32': holds an f32, not an integer"));
  REQUIRE_THROWS_WITH(g.get_int("t.u64"), Contains("does not fit a signed 64-bit integer"));
  REQUIRE_THROWS_WITH(g.get_bool("t.i8"), Contains("holds an i8, not a bool"));
  REQUIRE_THROWS_WITH(g.get_float("general.architecture"), Contains("holds a string"));
  REQUIRE_THROWS_WITH(g.get_string_array("t.u8s"), Contains("holds an array of u8"));
  REQUIRE_THROWS_WITH(g.get_int_array("t.strs"), Contains("holds an array of string"));
  REQUIRE_THROWS_WITH(g.get_float_array("t.nested"), Contains("holds an array of arrays"));
  REQUIRE_THROWS_WITH(g.get_string("t.strs"), Contains("holds an array of string, not a string"));
  CHECK(g.get_float("t.i32") == -2000000000.0); // integers read as floats
  CHECK(g.get_float_array("t.u8s") == std::vector<double>{1.0, 255.0});
}

TEST_CASE("GGUF writer refuses what the reader would refuse", "[gguf]") {
  GgufWriter w;
  w.set_u32("a.b", 1);
  REQUIRE_THROWS_WITH(w.set_u32("a.b", 2), Contains("key 'a.b': set twice"));
  REQUIRE_THROWS_WITH(w.set_string("", "x"), Contains("empty metadata key"));
  REQUIRE_THROWS_WITH(w.set_string("a.\xff", "x"), Contains("not valid UTF-8"));
  REQUIRE_THROWS_WITH(w.set_string("a.s", "\xed\xa0\x80"), Contains("not valid UTF-8"));
  REQUIRE_THROWS_WITH(w.set_u32("general.alignment", 64), Contains("set_alignment"));
  REQUIRE_THROWS_WITH(w.set_alignment(48), Contains("not a power of two"));
  REQUIRE_THROWS_WITH(w.set_alignment(0), Contains("not a power of two"));
  REQUIRE_THROWS_WITH(w.set_version(1), Contains("version 1 cannot be written"));
  REQUIRE_THROWS_WITH(w.set_array("a.u8", GgufValueType::u8, {std::int64_t{256}}),
                      Contains("not an integer that fits u8"));
  REQUIRE_THROWS_WITH(w.set_array("a.f", GgufValueType::f32, {std::string("x")}),
                      Contains("not a float"));
  GgufValue deep;
  deep.type = GgufValueType::array;
  deep.elem_type = GgufValueType::array;
  deep.nested.push_back(deep);
  deep.nested[0].nested.push_back(GgufValue{});
  deep.nested[0].nested[0].type = GgufValueType::array;
  REQUIRE_THROWS_WITH(w.set("a.deep", deep), Contains("one level deep"));
  const auto q = pattern_bytes(18, 0);
  REQUIRE_THROWS_WITH(w.add_tensor("t", GgmlType::q4_0, {48}, q),
                      Contains("not a whole number of Q4_0 blocks (32)"));
  REQUIRE_THROWS_WITH(w.add_tensor("t", GgmlType::q4_0, {64}, q), Contains("needs 36"));
  REQUIRE_THROWS_WITH(w.add_tensor("t", GgmlType::q4_0, {}, q), Contains("0 dimensions"));
  REQUIRE_THROWS_WITH(w.add_tensor("t", GgmlType::q4_0, {32, 1, 1, 1, 1}, q),
                      Contains("5 dimensions"));
  REQUIRE_THROWS_WITH(w.add_tensor("t", static_cast<GgmlType>(4), {32}, q),
                      Contains("unknown ggml type 4"));
  w.add_tensor("t", GgmlType::q4_0, {32}, q);
  REQUIRE_THROWS_WITH(w.add_tensor("t", GgmlType::q4_0, {32}, q), Contains("added twice"));
  // What it did accept reads back.
  const auto img = w.image(); // the views point into it: it must outlive g
  const GgufFile g = parse_image(img);
  CHECK(g.get_int("a.b") == 1);
  CHECK(g.tensors().size() == 1);
  // A known type that tpullm cannot import is fine at parse time.
  GgufWriter w2;
  w2.add_tensor("iq", GgmlType::iq2_xxs, {256, 2}, pattern_bytes(132, 1));
  w2.add_tensor("tq", GgmlType::tq1_0, {256}, pattern_bytes(54, 2));
  w2.add_tensor_f32("f", {2}, std::vector<float>{1.0f, 2.0f});
  const auto img2 = w2.image();
  const GgufFile g2 = parse_image(img2);
  CHECK(g2.find_tensor("iq")->type == GgmlType::iq2_xxs);
  CHECK(g2.find_tensor("tq")->bytes.size() == 54);
  float f[2];
  std::memcpy(f, g2.find_tensor("f")->bytes.data(), 8);
  CHECK(f[1] == 2.0f);
}

TEST_CASE("GGUF files written by llama.cpp (shared cases)", "[gguf][shared]") {
  int cases = 0;
  std::error_code ec;
  for (const fs::path& root : gguf_case_roots()) {
    if (!fs::is_directory(root, ec))
      continue;
    for (const auto& e : fs::directory_iterator(root)) {
      const fs::path model = e.path() / "model.gguf";
      if (!fs::is_regular_file(model))
        continue;
      const std::string folder = e.path().filename().string();
      CAPTURE(folder);
      ++cases;
      CHECK(GgufFile::looks_like_gguf(model));
      const GgufFile g = GgufFile::open(model);
      const nlohmann::json goldens =
          nlohmann::json::parse(fe_test::read_file(e.path() / "goldens.json"));
      const std::string arch = folder.substr(0, folder.find('-'));
      CHECK(g.get_string("general.architecture") == arch);
      CHECK(g.version() == 3);
      CHECK(g.alignment() == 32);
      const auto& types = goldens.at("gguf_tensor_types");
      CHECK(g.tensors().size() == types.size());
      std::set<std::int64_t> blocks;
      for (const GgufTensor& t : g.tensors()) {
        CAPTURE(t.name);
        REQUIRE(types.contains(t.name));
        CHECK(conversion::ggml_name(t.type) == types.at(t.name).get<std::string>());
        CHECK(t.offset % 32 == 0);
        if (t.name.rfind("blk.", 0) == 0)
          blocks.insert(std::stoll(t.name.substr(4)));
      }
      CHECK(g.get_int(arch + ".block_count") == static_cast<std::int64_t>(blocks.size()));
      const GgufTensor* embd = g.find_tensor("token_embd.weight");
      REQUIRE(embd);
      CHECK(embd->ne[0] == g.get_int(arch + ".embedding_length"));
      const auto tokens = g.get_string_array("tokenizer.ggml.tokens");
      REQUIRE(tokens);
      CHECK(static_cast<std::int64_t>(tokens->size()) == embd->ne[1]);
      CHECK(g.get_string("tokenizer.ggml.model") == "gpt2");
    }
  }
  CHECK(cases >= 5);
}

TEST_CASE("GGUF bad input: not a GGUF, truncated at every byte", "[gguf][bad]") {
  expect_refused({}, ErrorKind::invalid_input, {"not a GGUF file"});
  expect_refused({std::byte{'G'}, std::byte{'G'}, std::byte{'U'}}, ErrorKind::invalid_input,
                 {"not a GGUF file"});
  auto img = small_writer().image();
  auto wrong = img;
  wrong[3] = std::byte{'X'};
  expect_refused(wrong, ErrorKind::invalid_input, {"magic"});

  // Every prefix that cuts into the header, metadata, tensor infos or any tensor's bytes is
  // refused; the padding after the last tensor is not needed.
  const GgufFile full = parse_image(img);
  const GgufTensor& last = full.tensors().back();
  const std::size_t needed = static_cast<std::size_t>(
      last.bytes.data() + last.bytes.size() - reinterpret_cast<const std::byte*>(img.data()));
  for (std::size_t n = 0; n < needed; ++n) {
    CAPTURE(n);
    const std::vector<std::byte> cut(img.begin(), img.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      (void)parse_image(cut);
      FAIL("a prefix of " << n << " bytes parsed");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::invalid_input);
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
  for (std::size_t n = needed; n <= img.size(); ++n)
    CHECK_NOTHROW(parse_image(
        std::vector<std::byte>(img.begin(), img.begin() + static_cast<std::ptrdiff_t>(n))));
  // A truncated file on disk names the file (and the tensor when cut in the data).
  fe_test::TempDir tmp;
  fe_test::write_file(tmp / "cut.gguf",
                      std::string(reinterpret_cast<const char*>(img.data()), needed - 1));
  REQUIRE_THROWS_WITH(GgufFile::open(tmp / "cut.gguf"),
                      Contains("cut.gguf: tensor 'blk.0.w': data [") &&
                          Contains("runs past the end of the file"));
  REQUIRE_THROWS_WITH(GgufFile::open(tmp / "missing.gguf"), Contains("I/O error"));
  CHECK_FALSE(GgufFile::looks_like_gguf(tmp / "missing.gguf"));
  CHECK_FALSE(GgufFile::looks_like_gguf(tmp.path));
  fe_test::write_file(tmp / "text.gguf", "{\"not\": \"gguf\"}");
  CHECK_FALSE(GgufFile::looks_like_gguf(tmp / "text.gguf"));
  REQUIRE_THROWS_WITH(GgufFile::open(tmp / "text.gguf"), Contains("text.gguf: not a GGUF file"));
}

TEST_CASE("GGUF bad input: versions and byte order", "[gguf][bad]") {
  auto img = small_writer().image();
  poke<std::uint32_t>(img, 4, 1);
  expect_refused(img, ErrorKind::unsupported, {"GGUF version 1", "not supported"});
  poke<std::uint32_t>(img, 4, 4);
  expect_refused(img, ErrorKind::unsupported, {"GGUF version 4 is not supported"});
  poke<std::uint32_t>(img, 4, 0);
  expect_refused(img, ErrorKind::unsupported, {"GGUF version 0"});
  poke<std::uint32_t>(img, 4, 0x03000000u);
  expect_refused(img, ErrorKind::unsupported, {"big-endian"});
  poke<std::uint32_t>(img, 4, 2);
  CHECK(parse_image(img).version() == 2);
}

TEST_CASE("GGUF bad input: absurd counts and lengths", "[gguf][bad]") {
  const auto base = small_writer().image();
  auto img = base;
  poke<std::uint64_t>(img, 8, ~std::uint64_t{0});
  expect_refused(img, ErrorKind::invalid_input, {"tensor count", "exceeds the limit"});
  img = base;
  poke<std::uint64_t>(img, 8, kGgufMaxTensors);
  expect_refused(img, ErrorKind::invalid_input, {"truncated file", "tensor infos need at least"});
  img = base;
  poke<std::uint64_t>(img, 16, std::uint64_t{1} << 40);
  expect_refused(img, ErrorKind::invalid_input, {"metadata key count", "exceeds the limit"});
  img = base;
  poke<std::uint64_t>(img, 16, 60000);
  expect_refused(img, ErrorKind::invalid_input, {"truncated file"});
  img = base;
  poke<std::uint64_t>(img, after_string(img, "t.strs") + 8, std::uint64_t{1} << 40);
  expect_refused(img, ErrorKind::invalid_input, {"key 't.strs'", "array of 1099511627776"});
  img = base;
  poke<std::uint64_t>(img, after_string(img, "t.strs") + 8, kGgufMaxArray);
  expect_refused(img, ErrorKind::invalid_input, {"key 't.strs'", "truncated file: array of"});
  img = base;
  poke<std::uint64_t>(img, after_string(img, "t.u8s") + 8, 1000000);
  expect_refused(img, ErrorKind::invalid_input, {"key 't.u8s'", "truncated"});
  img = base;
  // The string value of general.architecture: its length field follows the key and type.
  poke<std::uint64_t>(img, after_string(img, "general.architecture") + 4, std::uint64_t{1} << 62);
  expect_refused(img, ErrorKind::invalid_input, {"key 'general.architecture'", "longer than the"});
  img = base;
  poke<std::uint64_t>(img, after_string(img, "general.architecture") + 4, 1000000);
  expect_refused(img, ErrorKind::invalid_input, {"key 'general.architecture'", "truncated"});
  // A key's own length.
  img = base;
  poke<std::uint64_t>(img, after_string(img, "t.u8") - 4 - 8, std::uint64_t{1} << 50);
  expect_refused(img, ErrorKind::invalid_input, {"metadata key #", "longer than the"});
  // Tensor dims: count, size, overflow.
  img = base;
  poke<std::uint32_t>(img, tensor_ndims_at(img, "w.f32"), 5);
  expect_refused(img, ErrorKind::invalid_input, {"tensor 'w.f32'", "5 dimensions"});
  img = base;
  poke<std::uint32_t>(img, tensor_ndims_at(img, "w.f32"), 0);
  expect_refused(img, ErrorKind::invalid_input, {"tensor 'w.f32'", "0 dimensions"});
  img = base;
  poke<std::uint64_t>(img, tensor_ne_at(img, "w.f32", 1), ~std::uint64_t{0});
  expect_refused(img, ErrorKind::invalid_input, {"tensor 'w.f32'", "ne[1]", "out of range"});
  img = base;
  poke<std::uint64_t>(img, tensor_ne_at(img, "w.f32", 1), std::uint64_t{1} << 62);
  expect_refused(img, ErrorKind::invalid_input, {"tensor 'w.f32'", "overflows 64 bits"});
  img = base; // found by the fuzzer: ne[0] fits int64 but its F32 row of bytes does not
  poke<std::uint64_t>(img, tensor_ne_at(img, "w.f32", 0), std::uint64_t{1} << 62);
  poke<std::uint64_t>(img, tensor_ne_at(img, "w.f32", 1), 1);
  expect_refused(img, ErrorKind::invalid_input,
                 {"tensor 'w.f32'", "row of 4611686018427387904 elements overflows"});
  img = base;
  poke<std::uint64_t>(img, tensor_ne_at(img, "w.f32", 1), std::uint64_t{1} << 40);
  expect_refused(img, ErrorKind::invalid_input, {"tensor 'w.f32'", "runs past the end"});
}

TEST_CASE("GGUF bad input: tensor offsets, types and overlaps", "[gguf][bad]") {
  const auto base = small_writer().image();
  const GgufFile g = parse_image(base);
  auto img = base;
  poke<std::uint64_t>(img, tensor_offset_at(img, "w.f32"), std::uint64_t{1} << 20);
  expect_refused(img, ErrorKind::invalid_input, {"tensor 'w.f32'", "runs past the end"});
  img = base;
  poke<std::uint64_t>(img, tensor_offset_at(img, "w.f32"), ~std::uint64_t{0} - 31);
  expect_refused(img, ErrorKind::invalid_input, {"tensor 'w.f32'", "runs past the end"});
  img = base;
  poke<std::uint64_t>(img, tensor_offset_at(img, "w.f32"), 4);
  expect_refused(img, ErrorKind::invalid_input,
                 {"tensor 'w.f32'", "data offset 4 is not a multiple of the alignment 32"});
  img = base;
  poke<std::uint64_t>(img, tensor_offset_at(img, "blk.0.w"), g.find_tensor("w.q4_0")->offset);
  expect_refused(img, ErrorKind::invalid_input, {"'w.q4_0'", "'blk.0.w'", "overlap"});
  img = base;
  poke<std::uint64_t>(img, tensor_offset_at(img, "w.q4_0"), 0);
  expect_refused(img, ErrorKind::invalid_input, {"'w.f32' [0, 64)", "overlap"});
  // Unknown type ids (never defined, retired, far out) refused naming the tensor.
  for (std::uint32_t id : {4u, 5u, 31u, 36u, 43u, 1000u, ~0u}) {
    img = base;
    poke<std::uint32_t>(img, tensor_type_at(img, "w.q4_0"), id);
    expect_refused(img, ErrorKind::unsupported,
                   {"tensor 'w.q4_0'", str_cat("unknown ggml type id ", id)});
  }
  // A type whose blocks do not divide the row (ne[0] = 64: Q4_K needs 256, IQ4_XS 256).
  img = base;
  poke<std::uint32_t>(img, tensor_type_at(img, "w.q4_0"), 12);
  expect_refused(img, ErrorKind::invalid_input,
                 {"tensor 'w.q4_0'", "not a whole number of Q4_K blocks of 256"});
  img = base;
  poke<std::uint64_t>(img, tensor_ne_at(img, "w.q4_0", 0), 48);
  expect_refused(img, ErrorKind::invalid_input,
                 {"tensor 'w.q4_0'", "ne[0] = 48", "Q4_0 blocks of 32"});
  // A type whose bytes for this shape exceed the room: F32 [8, 2] (64 bytes) as F64 needs 128,
  // overlapping the next tensor.
  img = base;
  poke<std::uint32_t>(img, tensor_type_at(img, "w.f32"), 28);
  expect_refused(img, ErrorKind::invalid_input, {"'w.f32' [0, 128)", "overlap"});
  // The last tensor grown past the end of the file.
  img = base;
  poke<std::uint32_t>(img, tensor_type_at(img, "blk.0.w"), 15); // Q8_K: 292 bytes a block
  expect_refused(img, ErrorKind::invalid_input, {"tensor 'blk.0.w'", "runs past the end"});
}

TEST_CASE("GGUF bad input: UTF-8, duplicates, alignment, value types", "[gguf][bad]") {
  const auto base = small_writer().image();
  auto img = base;
  // A key that is not UTF-8: general.nameX -> general.name\xff.
  img[after_string(img, "general.nameX") - 1] = std::byte{0xff};
  expect_refused(img, ErrorKind::invalid_input, {"metadata key #", "key is not valid UTF-8"});
  img = base;
  img[after_string(img, "w.q4_0") - 1] = std::byte{0xc0}; // "w.q4_\xc0": truncated sequence
  expect_refused(img, ErrorKind::invalid_input, {"tensor #1", "name is not valid UTF-8"});
  img = base;
  img[after_string(img, "general.architecture") + 4 + 8] = std::byte{0xed}; // "\xedlama"
  expect_refused(img, ErrorKind::invalid_input,
                 {"key 'general.architecture'", "value is not valid UTF-8"});
  img = base;
  {
    // The second element of t.strs ("\xc3\xa9t\xc3\xa9") made an overlong form.
    const std::size_t at = after_string(img, "\xc3\xa9t\xc3\xa9") - 5;
    img[at] = std::byte{0xc1};
    expect_refused(img, ErrorKind::invalid_input,
                   {"key 't.strs'", "array element 1: value is not valid UTF-8"});
  }
  // Duplicates: a key renamed in place to the key after it ("t.u32" -> "t.i32"), and a tensor
  // name renamed to the one before it.
  img = base;
  img[after_string(img, "t.u32") - 3] = std::byte{'i'};
  expect_refused(img, ErrorKind::invalid_input, {"key 't.i32'", "duplicate key"});
  {
    GgufWriter w;
    w.add_tensor_f32("a.x", {4}, std::vector<float>(4, 1.0f));
    w.add_tensor_f32("a.y", {4}, std::vector<float>(4, 2.0f));
    img = w.image();
    img[after_string(img, "a.y") - 1] = std::byte{'x'};
    expect_refused(img, ErrorKind::invalid_input, {"tensor 'a.x'", "duplicate tensor name"});
  }
  // Alignment keys.
  GgufWriter aw = small_writer();
  aw.set_alignment(64);
  const auto aligned = aw.image();
  for (std::uint32_t bad : {48u, 0u, 3u, 96u, 0x80000000u}) {
    img = aligned;
    poke<std::uint32_t>(img, after_string(img, "general.alignment") + 4, bad);
    expect_refused(
        img, ErrorKind::invalid_input,
        {"key 'general.alignment'", str_cat("alignment ", bad, " is not a power of two")});
  }
  img = aligned;
  poke<std::uint32_t>(img, after_string(img, "general.alignment"), 6); // u32 -> f32
  expect_refused(img, ErrorKind::invalid_input,
                 {"key 'general.alignment'", "holds an f32, not an integer"});
  // Value types.
  img = base;
  poke<std::uint32_t>(img, after_string(img, "t.u8"), 13);
  expect_refused(img, ErrorKind::invalid_input, {"key 't.u8'", "unknown value type 13"});
  img = base;
  poke<std::uint32_t>(img, after_string(img, "t.u8s"), 9);      // array
  poke<std::uint32_t>(img, after_string(img, "t.u8s") + 4, 77); // of type 77
  expect_refused(img, ErrorKind::invalid_input, {"key 't.u8s'", "unknown array element type 77"});
  img = base;
  img[after_string(img, "t.bool") + 4] = std::byte{2};
  expect_refused(img, ErrorKind::invalid_input,
                 {"key 't.bool'", "bool value is 2, neither 0 nor 1"});
  img = base;
  // t.nested's inner array made an array of arrays (two levels deep).
  poke<std::uint32_t>(img, after_string(img, "t.nested") + 4 + 4 + 8, 9);
  expect_refused(img, ErrorKind::invalid_input, {"key 't.nested'", "more than one level deep"});
}

TEST_CASE("GGUF bad input: hand-made headers", "[gguf][bad]") {
  // No tensors, no keys: valid (and empty).
  auto img = raw_header(3, 0, 0);
  const GgufFile empty = parse_image(img);
  CHECK(empty.tensors().empty());
  CHECK(empty.metadata().empty());
  // One key announced, none there.
  img = raw_header(3, 0, 1);
  expect_refused(img, ErrorKind::invalid_input, {"truncated file"});
  // An empty key.
  img = raw_header(3, 0, 1);
  append_str(img, "");
  append<std::uint32_t>(img, 0);
  append<std::uint8_t>(img, 1);
  append<std::uint8_t>(img, 0); // the 14 bytes the smallest key takes
  expect_refused(img, ErrorKind::invalid_input, {"metadata key #0", "empty key"});
  // An empty tensor name.
  img = raw_header(3, 1, 0);
  append_str(img, "");
  append<std::uint32_t>(img, 1);
  append<std::uint64_t>(img, 1);
  append<std::uint32_t>(img, 0);
  append<std::uint64_t>(img, 0);
  append<std::uint8_t>(img, 0); // the 33 bytes the smallest tensor info takes
  expect_refused(img, ErrorKind::invalid_input, {"tensor #0", "empty tensor name"});
  // A tensor with zero elements needs no data (and none is there).
  img = raw_header(3, 1, 0);
  append_str(img, "z");
  append<std::uint32_t>(img, 2);
  append<std::uint64_t>(img, 0);
  append<std::uint64_t>(img, 5);
  append<std::uint32_t>(img, 0);
  append<std::uint64_t>(img, 0);
  const GgufFile z = parse_image(img);
  CHECK(z.tensors().at(0).numel() == 0);
  CHECK(z.tensors().at(0).bytes.empty());
  // Nearly all of a kGgufMaxArray-element array of u8 announced in a tiny file: refused before
  // anything is allocated, in bounded time.
  img = raw_header(3, 0, 1);
  append_str(img, "big");
  append<std::uint32_t>(img, 9);
  append<std::uint32_t>(img, 0);
  append<std::uint64_t>(img, kGgufMaxArray);
  expect_refused(img, ErrorKind::invalid_input, {"key 'big'", "truncated file: array of"});
  // An array of kGgufMaxArray empty arrays would take 12 bytes each: refused up front too.
  img = raw_header(3, 0, 1);
  append_str(img, "big");
  append<std::uint32_t>(img, 9);
  append<std::uint32_t>(img, 9);
  append<std::uint64_t>(img, kGgufMaxArray);
  img.resize(img.size() + 1000, std::byte{0});
  expect_refused(img, ErrorKind::invalid_input, {"key 'big'", "truncated file"});
}

} // namespace gguf_test
