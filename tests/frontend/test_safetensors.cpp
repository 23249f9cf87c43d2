#include "frontend_test_util.hpp"

#include "tpullm/frontend/safetensors.hpp"
#include "tpullm/support/error.hpp"
#include "tpullm/support/mapped_file.hpp"

#include <catch2/catch.hpp>

using namespace tpullm;
using namespace tpullm::frontend;
using namespace fe_test;
using Catch::Contains;

namespace {

std::string f32_bytes(std::initializer_list<float> v) {
  std::string s;
  for (float f : v)
    s.append(reinterpret_cast<const char*>(&f), 4);
  return s;
}

SafetensorsFile parse_string(const std::string& s) {
  return SafetensorsFile::parse(std::as_bytes(std::span<const char>(s.data(), s.size())), nullptr,
                                "mem.safetensors");
}

} // namespace

TEST_CASE("Error composes kind, where and message", "[error]") {
  const Error e(ErrorKind::unsupported, "a/b.json", "thing 'x' is not supported");
  CHECK(std::string(e.what()) == "unsupported: a/b.json: thing 'x' is not supported");
  CHECK(e.kind() == ErrorKind::unsupported);
  CHECK(e.where() == "a/b.json");
  const Error outer = e.within("dir");
  CHECK(std::string(outer.what()) == "unsupported: dir: a/b.json: thing 'x' is not supported");
  CHECK(std::string(Error(ErrorKind::internal, "", "bug").what()) == "internal error: bug");
  REQUIRE_THROWS_WITH(throw_error(ErrorKind::io, "f", "n=", 3), "I/O error: f: n=3");
  CHECK_NOTHROW(check(true, ErrorKind::io, "f", "never"));
}

TEST_CASE("MappedFile maps, shares and refuses clearly", "[mapped_file]") {
  TempDir t;
  write_file(t / "x.bin", "hello");
  auto m = MappedFile::open(t / "x.bin");
  REQUIRE(m->size() == 5);
  CHECK(std::string(reinterpret_cast<const char*>(m->bytes().data()), 5) == "hello");
  write_file(t / "empty.bin", "");
  REQUIRE_THROWS_WITH(MappedFile::open(t / "empty.bin"), Contains("empty.bin: file is empty"));
  REQUIRE_THROWS_WITH(MappedFile::open(t / "nope.bin"),
                      Contains("nope.bin: cannot open file: No such file"));
  REQUIRE_THROWS_WITH(MappedFile::open(t.path), Contains("not a regular file"));
  MappedFile a(MappedFile::map_tag{}, t / "x.bin");
  MappedFile b = std::move(a);
  CHECK(b.size() == 5);
  CHECK(a.size() == 0); // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  a = std::move(b);
  CHECK(a.bytes()[4] == std::byte{'o'});
}

TEST_CASE("all five real checkpoints open with the expected tensors", "[safetensors]") {
  struct Expect {
    std::string model;
    std::size_t count;
    std::string probe;
    DType dtype;
    std::vector<std::int64_t> shape;
  };
  const std::vector<Expect> cases = {
      {"llama-gqa", 30, "model.layers.0.self_attn.k_proj.weight", DType::f32, {64, 128}},
      {"qwen2-tied-bias", 38, "model.layers.0.self_attn.k_proj.bias", DType::bf16, {32}},
      {"qwen3-headdim", 36, "model.layers.0.self_attn.q_proj.weight", DType::f32, {256, 128}},
      {"llama-gqa-gptq-g32",
       3 + 3 * (2 + 7 * 4),
       "model.layers.0.mlp.down_proj.qweight",
       DType::i32,
       {44, 128}},
      {"qwen2-tied-bias-awq-g32",
       2 + 3 * (2 + 7 * 3 + 3),
       "model.layers.0.mlp.gate_proj.qweight",
       DType::i32,
       {128, 40}},
  };
  for (const auto& c : cases) {
    INFO(c.model);
    const SafetensorsFile f = SafetensorsFile::open(model_dir(c.model) / "model.safetensors");
    CHECK(f.size() == c.count);
    CHECK(f.metadata().at("format") == "pt");
    const TensorView& v = f.at(c.probe);
    CHECK(v.dtype == c.dtype);
    CHECK(v.shape == c.shape);
    CHECK(static_cast<std::size_t>(v.numel()) * dtype_size(v.dtype) == v.bytes.size());
    CHECK(v.is_aligned());
  }
}

TEST_CASE("tensor values read back exactly (f32, bf16, f16, i32)", "[safetensors]") {
  const auto llama = SafetensorsFile::open(model_dir("llama-gqa") / "model.safetensors");
  const auto norm = llama.at("model.norm.weight").to_f32();
  REQUIRE(norm.size() == 128);
  CHECK(norm[0] == 0.8748636841773987f);
  CHECK(norm[1] == 1.2423497438430786f);
  CHECK(llama.at("model.norm.weight").data<float>()[2] == 1.0185562372207642f);
  CHECK(llama.at("model.layers.1.self_attn.k_proj.weight").to_f32()[1] == -0.015598447062075138f);

  const auto qwen = SafetensorsFile::open(model_dir("qwen2-tied-bias") / "model.safetensors");
  const auto qb = qwen.at("model.layers.0.self_attn.q_proj.bias").to_f32();
  CHECK(qb[0] == 0.032958984375f);
  CHECK(qb[2] == -0.0223388671875f);

  const auto gptq = SafetensorsFile::open(model_dir("llama-gqa-gptq-g32") / "model.safetensors");
  const auto& qw = gptq.at("model.layers.0.self_attn.q_proj.qweight");
  const auto words = qw.to_i32();
  CHECK(static_cast<std::uint32_t>(words[0]) == 0x2761b977u);
  CHECK(static_cast<std::uint32_t>(words[1]) == 0x7c82efacu);
  CHECK(static_cast<std::uint32_t>(qw.data<std::int32_t>()[1]) == 0x7c82efacu);
  CHECK(gptq.at("model.layers.0.self_attn.q_proj.scales").to_f32()[0] == 0.03887939453125f);
  REQUIRE_THROWS_WITH(qw.to_f32(), Contains("cannot convert I32 to f32"));
  REQUIRE_THROWS_WITH(qw.data<float>(), Contains("expects dtype F32 but the tensor is I32"));
}

TEST_CASE("synthetic files: every dtype, scalars, empty tensors", "[safetensors]") {
  std::string data;
  const auto put = [&](const void* p, std::size_t n) {
    data.append(static_cast<const char*>(p), n);
  };
  const std::uint16_t bf = f32_to_bf16(1.5f), hf = f32_to_f16(-0.25f);
  const double d = 2.5;
  const std::int64_t i64 = -5;
  const std::int8_t i8 = -3;
  put(&bf, 2);
  put(&hf, 2);
  put(&d, 8);
  put(&i64, 8);
  put(&i8, 1);
  const std::string header = R"({"bf":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},)"
                             R"("hf":{"dtype":"F16","shape":[1],"data_offsets":[2,4]},)"
                             R"("d":{"dtype":"F64","shape":[1],"data_offsets":[4,12]},)"
                             R"("l":{"dtype":"I64","shape":[1,1],"data_offsets":[12,20]},)"
                             R"("b":{"dtype":"I8","shape":[1],"data_offsets":[20,21]},)"
                             R"("e":{"dtype":"F32","shape":[3,0],"data_offsets":[21,21]}})";
  const std::string image = raw_safetensors(header, data); // parse() borrows: keep it alive
  const auto f = parse_string(image);
  CHECK(f.metadata().empty());
  CHECK(f.at("bf").to_f32() == std::vector<float>{1.5f});
  CHECK(f.at("bf").rank() == 0);
  CHECK(f.at("hf").to_f32() == std::vector<float>{-0.25f});
  CHECK(f.at("d").to_f32() == std::vector<float>{2.5f});
  CHECK(f.at("l").to_i64() == std::vector<std::int64_t>{-5});
  CHECK(f.at("l").to_i32() == std::vector<std::int32_t>{-5});
  CHECK(f.at("b").to_i32() == std::vector<std::int32_t>{-3});
  CHECK(f.at("e").numel() == 0);
  CHECK(f.at("e").to_f32().empty());
  CHECK(f.names() == std::vector<std::string>{"b", "bf", "d", "e", "hf", "l"});
}

TEST_CASE("misaligned data: copying accessors work, zero-copy refuses", "[safetensors]") {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  // 8 + 56 = 64: data region starts 8-aligned, the tensor at +1 is misaligned.
  std::string h = header;
  while ((8 + h.size()) % 8)
    h += ' ';
  const std::string s = raw_safetensors(h, std::string(1, '\0') + f32_bytes({1.0f, -2.0f}));
  std::vector<std::uint64_t> aligned((s.size() + 7) / 8);
  std::memcpy(aligned.data(), s.data(), s.size());
  const auto f = SafetensorsFile::parse(
      std::as_bytes(std::span<const char>(reinterpret_cast<const char*>(aligned.data()), s.size())),
      nullptr, "mis.safetensors");
  const TensorView& v = f.at("w");
  CHECK_FALSE(v.is_aligned());
  CHECK(v.to_f32() == std::vector<float>{1.0f, -2.0f});
  CHECK(v.copy_as<float>() == std::vector<float>{1.0f, -2.0f});
  REQUIRE_THROWS_WITH(v.data<float>(), Contains("mis.safetensors: tensor 'w'") &&
                                           Contains("not aligned to 4 bytes"));
}

TEST_CASE("broken safetensors files are refused with a precise message", "[safetensors][neg]") {
  TempDir t;
  const std::string ok_header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  const std::string ok_data = f32_bytes({1, 2, 3, 4});
  const auto open_bytes = [&](const std::string& name, const std::string& bytes) {
    write_file(t / name, bytes);
    return SafetensorsFile::open(t / name);
  };

  SECTION("valid baseline") {
    CHECK(open_bytes("ok.safetensors", raw_safetensors(ok_header, ok_data)).at("w").numel() == 4);
  }
  SECTION("file shorter than the length prefix") {
    REQUIRE_THROWS_WITH(open_bytes("short.safetensors", std::string("\x10\x00\x00", 3)),
                        Contains("short.safetensors: file is 3 bytes, too small"));
  }
  SECTION("truncated data") {
    const std::string full = raw_safetensors(ok_header, ok_data);
    REQUIRE_THROWS_WITH(open_bytes("trunc.safetensors", full.substr(0, full.size() - 5)),
                        Contains("trunc.safetensors: tensor 'w': data_offsets [0,16] run past "
                                 "the data region of 11 bytes"));
  }
  SECTION("header length past EOF") {
    REQUIRE_THROWS_WITH(open_bytes("h.safetensors", raw_safetensors(ok_header, ok_data, 5000)),
                        Contains("header length 5000 exceeds the file size") &&
                            Contains("truncated file?"));
  }
  SECTION("absurd header length") {
    REQUIRE_THROWS_WITH(
        open_bytes("h.safetensors", raw_safetensors(ok_header, ok_data, 1ull << 40)),
        Contains("header length 1099511627776 is larger than the 104857600-byte limit"));
  }
  SECTION("invalid JSON") {
    REQUIRE_THROWS_WITH(open_bytes("j.safetensors", raw_safetensors("{\"w\": [1, 2", ok_data)),
                        Contains("j.safetensors: header: invalid JSON"));
  }
  SECTION("header is not an object") {
    REQUIRE_THROWS_WITH(open_bytes("j.safetensors", raw_safetensors("[1,2]", ok_data)),
                        Contains("header is not a JSON object but a array"));
  }
  SECTION("duplicate tensor name") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    REQUIRE_THROWS_WITH(open_bytes("d.safetensors", raw_safetensors(h, ok_data)),
                        Contains("duplicate key 'w'"));
  }
  SECTION("lying data_offsets past the data region") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}})";
    REQUIRE_THROWS_WITH(open_bytes("o.safetensors", raw_safetensors(h, ok_data)),
                        Contains("tensor 'w': data_offsets [8,24] run past the data region of "
                                 "16 bytes"));
  }
  SECTION("end before begin") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})";
    REQUIRE_THROWS_WITH(open_bytes("o.safetensors", raw_safetensors(h, ok_data)),
                        Contains("data_offsets [8,4]: end < begin"));
  }
  SECTION("negative or fractional offsets") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})";
    REQUIRE_THROWS_WITH(open_bytes("o.safetensors", raw_safetensors(h, ok_data)),
                        Contains("are not non-negative integers"));
    const std::string h2 = R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})";
    REQUIRE_THROWS_WITH(open_bytes("o2.safetensors", raw_safetensors(h2, ok_data)),
                        Contains("shape entry 1.5 is not a non-negative integer"));
  }
  SECTION("byte size does not match shape x dtype") {
    const std::string h = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})";
    REQUIRE_THROWS_WITH(open_bytes("s.safetensors", raw_safetensors(h, ok_data)),
                        Contains("s.safetensors: tensor 'w': data_offsets [0,16] hold 16 bytes "
                                 "but shape [3] x F32 needs 12"));
  }
  SECTION("shape product overflows") {
    const std::string h =
        R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,16]}})";
    REQUIRE_THROWS_WITH(open_bytes("s.safetensors", raw_safetensors(h, ok_data)),
                        Contains("has more elements than fit in 64 bits"));
    const std::string h2 =
        R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,16]}})";
    REQUIRE_THROWS_WITH(open_bytes("s2.safetensors", raw_safetensors(h2, ok_data)),
                        Contains("overflows 64 bits"));
  }
  SECTION("unknown dtype names the tensor and the dtype") {
    const std::string h = R"({"w8":{"dtype":"F8_E4M3","shape":[16],"data_offsets":[0,16]}})";
    REQUIRE_THROWS_WITH(open_bytes("u.safetensors", raw_safetensors(h, ok_data)),
                        Contains("unsupported: ") &&
                            Contains("u.safetensors: tensor 'w8': unsupported dtype 'F8_E4M3'"));
  }
  SECTION("overlapping tensors") {
    const std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
    REQUIRE_THROWS_WITH(open_bytes("ov.safetensors", raw_safetensors(h, ok_data)),
                        Contains("tensors 'a' [0, 8) and 'b' [4, 12) overlap"));
  }
  SECTION("missing fields and bad metadata") {
    REQUIRE_THROWS_WITH(
        open_bytes("m.safetensors",
                   raw_safetensors(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", ok_data)),
        Contains("tensor 'w': missing or non-string \"dtype\""));
    REQUIRE_THROWS_WITH(
        open_bytes(
            "m2.safetensors",
            raw_safetensors(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", ok_data)),
        Contains("\"data_offsets\" must be an array [begin, end]"));
    REQUIRE_THROWS_WITH(
        open_bytes("m3.safetensors", raw_safetensors(R"({"__metadata__":{"a":1}})", ok_data)),
        Contains("\"__metadata__\" value for 'a' is not a string"));
  }
  SECTION("missing tensor lookup names file and tensor") {
    const auto f = open_bytes("ok.safetensors", raw_safetensors(ok_header, ok_data));
    CHECK(f.find("nope") == nullptr);
    REQUIRE_THROWS_WITH(f.at("nope"), Contains("ok.safetensors: tensor 'nope' not found"));
  }
  SECTION("missing and empty files") {
    REQUIRE_THROWS_WITH(SafetensorsFile::open(t / "absent.safetensors"),
                        Contains("I/O error: ") && Contains("absent.safetensors: cannot open"));
    REQUIRE_THROWS_WITH(open_bytes("empty.safetensors", ""), Contains("file is empty"));
  }
}

TEST_CASE("views keep the mapping alive after the file object is gone", "[safetensors]") {
  TensorView v;
  {
    const auto f = SafetensorsFile::open(model_dir("llama-gqa") / "model.safetensors");
    v = f.at("model.norm.weight");
  }
  CHECK(v.to_f32()[0] == 0.8748636841773987f);
}

TEST_CASE("Checkpoint: single file, sharded index, and its failures", "[checkpoint]") {
  SECTION("real single-file directory") {
    const auto ck = Checkpoint::open(model_dir("qwen3-headdim"));
    CHECK(ck.size() == 36);
    CHECK(ck.shards().size() == 1);
    CHECK(ck.at("model.layers.2.self_attn.q_norm.weight").to_f32()[1] == 1.102387547492981f);
    REQUIRE_THROWS_WITH(ck.at("model.layers.9.mlp.up_proj.weight"),
                        Contains("qwen3-headdim: tensor 'model.layers.9.mlp.up_proj.weight' not "
                                 "found in checkpoint"));
  }
  SECTION("a .safetensors path opens as a one-file checkpoint") {
    const auto ck = Checkpoint::open(model_dir("llama-gqa") / "model.safetensors");
    CHECK(ck.contains("lm_head.weight"));
  }

  TempDir t;
  const auto a = make_entry("F32", {2, 3}, 1), b = make_entry("BF16", {4}, 2),
             c = make_entry("I32", {5}, 3);
  write_file(t / "s1.safetensors", make_safetensors({{"a", a}, {"b", b}}));
  write_file(t / "s2.safetensors", make_safetensors({{"c", c}, {"extra", c}}));
  const auto write_index = [&](const nlohmann::json& wm) {
    write_file(t / "model.safetensors.index.json",
               nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", wm}}.dump());
  };

  SECTION("sharded index") {
    write_index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}});
    const auto ck = Checkpoint::open(t.path);
    CHECK(ck.shards().size() == 2);
    CHECK(ck.names() == std::vector<std::string>{"a", "b", "c"});
    CHECK(ck.at("c").to_i32().size() == 5);
    CHECK(ck.at("b").dtype == DType::bf16);
    CHECK_FALSE(ck.contains("extra")); // only weight_map names are visible
    const Checkpoint copy = ck;        // copies stay valid
    CHECK(copy.at("a").shape == std::vector<std::int64_t>{2, 3});
  }
  SECTION("index pointing to a missing shard") {
    write_index({{"a", "s1.safetensors"}, {"z", "model-00009-of-00009.safetensors"}});
    REQUIRE_THROWS_WITH(Checkpoint::open(t.path),
                        Contains("model-00009-of-00009.safetensors: cannot open file") &&
                            Contains("shard listed in") && Contains("for tensor 'z'"));
  }
  SECTION("index naming a tensor its shard lacks") {
    write_index({{"a", "s1.safetensors"}, {"c", "s1.safetensors"}});
    REQUIRE_THROWS_WITH(Checkpoint::open(t.path),
                        Contains("model.safetensors.index.json: tensor 'c' is mapped to shard") &&
                            Contains("but that shard has no such tensor"));
  }
  SECTION("index escaping the directory") {
    write_index({{"a", "../s1.safetensors"}});
    REQUIRE_THROWS_WITH(Checkpoint::open(t.path),
                        Contains("which is not a plain file name in the checkpoint directory"));
  }
  SECTION("malformed index") {
    write_file(t / "model.safetensors.index.json", R"({"weight_map": [1]})");
    REQUIRE_THROWS_WITH(Checkpoint::open(t.path), Contains("missing or non-object \"weight_map\""));
    write_file(t / "model.safetensors.index.json", R"({"weight_map": )");
    REQUIRE_THROWS_WITH(Checkpoint::open(t.path), Contains("invalid JSON"));
  }
  SECTION("no checkpoint files at all") {
    TempDir empty;
    REQUIRE_THROWS_WITH(Checkpoint::open(empty.path),
                        Contains("no model.safetensors or model.safetensors.index.json"));
    REQUIRE_THROWS_WITH(Checkpoint::open(empty / "nope"),
                        Contains("checkpoint directory does not exist"));
  }
}
