// The bundle: what is written is what is read (every program, plan, buffer, attribute and
// weight byte), a bundle runs to bit-identical logits with the in-memory compiled model, writing
// is deterministic, and a damaged bundle (truncated, extended, another version, a flipped byte,
// random corruption of the metadata behind a valid checksum) is refused with an Error, never a
// crash. Generation through the BundleSession: greedy equals argmax of the logits, a seed
// reproduces its sample, bad prompts are refused.
#include "small_compile.hpp"
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <unistd.h>

#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/frontend/tensor_parallel.hpp"
#include "tpullm/rewrite/op_equivalence.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/support/crc32c.hpp"

using namespace tpullm;
namespace fs = std::filesystem;

namespace {

frontend::StageParams small_params() {
  return tpullm_test::small_params(128, 32, {64, 32});
}

struct Compiled {
  frontend::ModelDesc desc;
  codegen::CompiledModel model;
  bundle::ModelInfo info;
};

Compiled compile(const std::string& name, const std::string& mode = "f32") {
  Compiled c{frontend::load_model(tpullm_test::model_dir(name)), {}, {}};
  compiler::CompileOptions o;
  o.lower.mode = mode;
  o.target.cores = 2;
  c.model = compiler::compile(frontend::build_top_modules(c.desc, small_params()), o);
  c.info = bundle::make_model_info(c.desc, small_params(), mode);
  return c;
}

std::string bytes_of(const Compiled& c) {
  std::ostringstream os;
  bundle::write_bundle(c.model, c.info, os);
  return os.str();
}

/// A file in the test's temporary directory holding `bytes`; removed at scope exit.
struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& bytes, const std::string& tag = "b") {
    static int n = 0;
    path = fs::temp_directory_path() / ("tpullm-test-" + std::to_string(::getpid()) + "-" + tag +
                                        std::to_string(n++) + ".bundle");
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

std::uint64_t fnv(const char* p, std::size_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<unsigned char>(p[i])) * 0x100000001b3ull;
  return h;
}
std::uint64_t get64(const std::string& s, std::size_t at) {
  std::uint64_t v = 0;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}
void put64(std::string& s, std::size_t at, std::uint64_t v) {
  std::memcpy(s.data() + at, &v, 8);
}

bool same_ref(const codegen::TensorRef& a, const codegen::TensorRef& b) {
  return a.type == b.type && a.buffer == b.buffer && a.weight == b.weight;
}

/// Logits of a fixed conversation (prompt, decode of 3 tokens, second turn) on `s`.
std::vector<float> conversation(runtime::Session& s) {
  s.reset();
  std::vector<float> out =
      s.prefill({1,  5,  9,  2,  7,  3,  8,  4,  6,  10, 11, 12, 13, 14, 15, 16, 17, 18,
                 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35},
                true);
  for (std::int32_t t : {3, 1, 4}) {
    auto l = s.decode(t);
    out.insert(out.end(), l.begin(), l.end());
  }
  auto l = s.prefill({9, 8, 7}, true);
  out.insert(out.end(), l.begin(), l.end());
  return out;
}

} // namespace

TEST_CASE("a bundle holds exactly the compiled programs and weights", "[bundle]") {
  for (const char* name : {"qwen3-headdim", "llama-gqa-gptq-g32", "qwen2-tied-bias-awq-g32"}) {
    INFO(name);
    const auto c = compile(name);
    TempFile f(bytes_of(c));
    const auto b = bundle::Bundle::open(f.path);
    REQUIRE(b->programs().size() == c.model.programs.size());
    for (std::size_t i = 0; i < c.model.programs.size(); ++i) {
      const auto& want = c.model.programs[i];
      const auto& got = b->programs()[i];
      INFO("@" << want.name);
      CHECK(got.name == want.name);
      CHECK(got.info == want.info);
      CHECK(got.positions_arg == want.positions_arg);
      REQUIRE(got.args.size() == want.args.size());
      for (std::size_t k = 0; k < want.args.size(); ++k)
        CHECK(same_ref(got.args[k], want.args[k]));
      REQUIRE(got.instrs.size() == want.instrs.size());
      for (std::size_t k = 0; k < want.instrs.size(); ++k) {
        const auto& gi = got.instrs[k];
        const auto& wi = want.instrs[k];
        CHECK(rewrite::attributes_equal(gi.op, wi.op));
        CHECK(gi.plan == wi.plan);
        CHECK(gi.planned == wi.planned);
        REQUIRE(gi.operands.size() == wi.operands.size());
        for (std::size_t j = 0; j < wi.operands.size(); ++j)
          CHECK(same_ref(gi.operands[j], wi.operands[j]));
        REQUIRE(gi.results.size() == wi.results.size());
        for (std::size_t j = 0; j < wi.results.size(); ++j)
          CHECK(same_ref(gi.results[j], wi.results[j]));
      }
    }
    // Every weight byte as compiled, and 64-byte aligned in the mapping.
    for (const auto& w : b->weights()) {
      const ir::Weight* src = nullptr;
      for (const auto& m : c.model.modules)
        if ((src = m.find_weight(w.name)))
          break;
      REQUIRE(src != nullptr);
      CHECK(w.type == src->type);
      REQUIRE(w.parts.size() == src->parts.size());
      for (std::size_t k = 0; k < w.parts.size(); ++k) {
        CHECK(w.parts[k].role == src->parts[k].role);
        CHECK(reinterpret_cast<std::uintptr_t>(w.parts[k].bytes.data()) % 64 == 0);
        REQUIRE(w.parts[k].bytes.size() == src->parts[k].bytes.size());
        CHECK(std::memcmp(w.parts[k].bytes.data(), src->parts[k].bytes.data(),
                          w.parts[k].bytes.size()) == 0);
      }
    }
    CHECK(b->model().params.decode_lengths() == small_params().decode_lengths());
    CHECK(b->model().vocab == c.desc.dims.vocab);
  }
}

TEST_CASE("a bundle runs to the same logits as the in-memory compiled model", "[bundle]") {
  for (const char* mode : {"f32", "bf16"}) {
    INFO(mode);
    const auto c = compile("llama-gqa", mode);
    auto exec = runtime::make_executor(c.model);
    runtime::CompiledStages stages(*exec);
    runtime::Session mem(stages, runtime::session_dims(c.info), small_params());
    TempFile f(bytes_of(c));
    runtime::BundleSession engine(f.path);
    const auto a = conversation(mem);
    const auto b = conversation(engine.session());
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("writing a bundle is deterministic", "[bundle]") {
  const auto one = bytes_of(compile("qwen2-tied-bias"));
  const auto two = bytes_of(compile("qwen2-tied-bias"));
  CHECK(one.size() == two.size());
  CHECK(one == two);
  CHECK(one.compare(0, 8, std::string("TPULLMB\0", 8)) == 0);
}

// compile --tensor-parallel N (frontend/tensor_parallel.hpp): the bundle records N, its cache
// holds one rank's key / value heads, an older bundle reads 1, and a count that does not split
// the model, or one the cache rows disagree with, is refused naming the field.
TEST_CASE("a tensor-parallel bundle records its ranks and one rank's cache", "[bundle]") {
  Compiled c{frontend::load_model(tpullm_test::model_dir("llama-gqa")), {}, {}};
  compiler::CompileOptions o;
  o.target.cores = 2;
  c.model =
      compiler::compile(frontend::build_tensor_parallel_modules(c.desc, small_params(), 2), o);
  c.info = bundle::make_model_info(c.desc, small_params(), "f32");
  c.info.tensor_parallel = 2;
  {
    TempFile f(bytes_of(c));
    const auto b = bundle::Bundle::open(f.path);
    CHECK(b->model().tensor_parallel == 2);
    CHECK(b->kv().row_bytes == 32 * 4); // 1 of llama-gqa's 2 kv heads of 32 f32 values
  }
  {
    TempFile f(bytes_of(compile("llama-gqa")));
    CHECK(bundle::Bundle::open(f.path)->model().tensor_parallel == 1);
  }
  c.info.tensor_parallel = 3;
  CHECK_THROWS_WITH(bundle::Bundle::open(TempFile(bytes_of(c)).path),
                    Catch::Contains("model.tensor_parallel") && Catch::Contains("3 ranks"));
  c.info.tensor_parallel = 65;
  CHECK_THROWS_WITH(bundle::Bundle::open(TempFile(bytes_of(c)).path),
                    Catch::Contains("model.tensor_parallel") && Catch::Contains("[1, 64]"));
  c.info.tensor_parallel = 1; // whole rows expected, one rank's written
  CHECK_THROWS_WITH(bundle::Bundle::open(TempFile(bytes_of(c)).path),
                    Catch::Contains("kv.row_bytes"));
}

// compile --draft-mode (issue 37): a whole bundle embedded in another's weight blob opens as
// its draft, its weights in the same mapping, checked by the outer blob's checksums; a draft
// that embeds another, or whose model does not match, is refused.
TEST_CASE("a bundle carries an embedded draft model", "[bundle]") {
  const auto target = compile("qwen3-headdim");
  const auto draft = compile("qwen3-headdim", "bf16");
  const std::string draft_bytes = bytes_of(draft);
  auto with_draft = [&](const Compiled& c, const std::string& d) {
    std::ostringstream os;
    bundle::write_bundle(c.model, c.info, os,
                         std::as_bytes(std::span<const char>(d.data(), d.size())));
    return os.str();
  };
  const std::string both = with_draft(target, draft_bytes);
  TempFile f(both);
  const auto b = bundle::Bundle::open(f.path);
  REQUIRE(b->draft() != nullptr);
  CHECK(b->draft()->draft() == nullptr);
  CHECK(b->draft()->model().mode == "bf16");
  CHECK(b->model().mode == "f32");
  CHECK(b->draft()->file_bytes() == static_cast<std::int64_t>(draft_bytes.size()));
  CHECK(b->draft()->programs().size() == b->programs().size());
  // The draft's weights lie inside the outer blob, in the same mapping.
  const auto blob = b->weight_blob();
  const auto& w = b->draft()->weights().front().parts.front().bytes;
  CHECK(w.data() >= blob.data());
  CHECK(w.data() + w.size() <= blob.data() + blob.size());
  CHECK(b->verify_weights().chunks > 0);
  // Without a draft the bytes are what they were before the field existed.
  CHECK(bundle::Bundle::open(TempFile(bytes_of(target)).path)->draft() == nullptr);
  // A draft embedding a draft, and a flipped byte of the draft's metadata, are refused.
  TempFile nested(with_draft(target, both));
  CHECK_THROWS_WITH(bundle::Bundle::open(nested.path),
                    Catch::Contains("an embedded draft model embeds another"));
  std::string flip = both;
  const auto at = both.find(draft_bytes.substr(0, 256));
  REQUIRE(at != std::string::npos);
  flip[at + 64 + 100] = static_cast<char>(flip[at + 64 + 100] ^ 0x40);
  TempFile bad(flip);
  CHECK_THROWS_WITH(bundle::Bundle::open(bad.path),
                    Catch::Contains("(its draft model)") && Catch::Contains("checksum"));
  // A draft of another vocabulary is refused when the bundle opens.
  TempFile other(with_draft(target, bytes_of(compile("qwen2-tied-bias"))));
  CHECK_THROWS_WITH(bundle::Bundle::open(other.path),
                    Catch::Contains("vocabulary or sequence length differs"));
}

TEST_CASE("a damaged bundle is refused with a message naming the problem", "[bundle]") {
  const std::string good = bytes_of(compile("qwen3-headdim"));
  auto refused = [](const std::string& bytes, const std::string& what) {
    TempFile f(bytes);
    try {
      (void)bundle::Bundle::open(f.path);
      FAIL("opened a damaged bundle (" << what << ")");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(f.path.string()) != std::string::npos);
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refused(good.substr(0, 10), "10 bytes"), Catch::Contains("not a tpullm bundle"));
  CHECK_THAT(refused(good.substr(0, good.size() / 2), "half"), Catch::Contains("truncated"));
  CHECK_THAT(refused(good.substr(0, good.size() - 1), "one byte short"),
             Catch::Contains("truncated"));
  CHECK_THAT(refused(good + "x", "one byte more"), Catch::Contains("truncated or extended"));
  std::string v = good;
  v[8] = 2;
  CHECK_THAT(refused(v, "version 2"), Catch::Contains("format version 2"));
  std::string magic = good;
  magic[0] = 'X';
  CHECK_THAT(refused(magic, "magic"), Catch::Contains("not a tpullm bundle"));
  std::string flip = good;
  flip[64 + 100] = static_cast<char>(flip[64 + 100] ^ 0x40);
  CHECK_THAT(refused(flip, "flipped metadata byte"), Catch::Contains("checksum"));
  std::string hdr = good;
  put64(hdr, 32, get64(hdr, 32) + 64); // blob offset moved
  CHECK_THAT(refused(hdr, "blob offset"), Catch::Contains("corrupted header"));
}

TEST_CASE("random corruption behind a valid checksum never crashes the loader or the runtime",
          "[bundle]") {
  const std::string good = bytes_of(compile("qwen3-headdim"));
  const std::size_t meta_off = 64, meta_size = get64(good, 24);
  std::mt19937_64 rng(7);
  int refused = 0, opened = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const std::size_t at = meta_off + rng() % meta_size;
      bad[at] = static_cast<char>(bad[at] ^ static_cast<char>(1u << (rng() % 8)));
    }
    put64(bad, 56, fnv(bad.data() + meta_off, meta_size));
    TempFile f(bad, "fuzz");
    try {
      runtime::BundleSession engine(f.path);
      ++opened;
      // What opens must run or refuse cleanly.
      try {
        (void)engine.session().prefill({1, 2, 3}, false);
        (void)engine.session().decode(4);
      } catch (const Error&) {
      }
    } catch (const Error&) {
      ++refused;
    }
  }
  INFO("refused " << refused << ", opened " << opened);
  CHECK(refused > 30); // most flips land in offsets, types and sizes that the loader checks
}

TEST_CASE("generation through the engine: greedy, seeded sampling, refusals", "[bundle]") {
  const auto c = compile("llama-gqa");
  TempFile f(bytes_of(c));
  runtime::BundleSession engine(f.path);
  auto& s = engine.session();
  const std::vector<std::int32_t> prompt{1, 2, 3, 4, 5, 6, 7};

  runtime::GenerateOptions g;
  g.stop.max_new_tokens = 6;
  s.reset();
  const auto greedy = s.generate(prompt, g);
  REQUIRE(greedy.tokens.size() == 6);
  CHECK(greedy.reason == runtime::StopReason::token_budget);
  // Greedy = argmax of the logits at every step (teacher forcing the same tokens).
  s.reset();
  auto logits = s.prefill(prompt, false);
  for (std::size_t k = 0; k < greedy.tokens.size(); ++k) {
    const auto am = std::max_element(logits.begin(), logits.end()) - logits.begin();
    CHECK(am == greedy.tokens[k]);
    if (k + 1 < greedy.tokens.size())
      logits = s.decode(greedy.tokens[k]);
  }
  // An eos id stops at once; the sequence end is reported, not an error.
  g.stop.eos_ids = {greedy.tokens[0]};
  s.reset();
  CHECK(s.generate(prompt, g).reason == runtime::StopReason::eos);
  g.stop.eos_ids.clear();
  g.stop.max_new_tokens = 1000;
  s.reset();
  const auto full = s.generate(prompt, g);
  CHECK(full.reason == runtime::StopReason::sequence_end);
  CHECK(static_cast<std::int64_t>(prompt.size() + full.tokens.size()) ==
        small_params().seq_length + 1);
  // A seed reproduces its sample; another seed (almost surely) differs.
  g.stop.max_new_tokens = 12;
  g.sampling.temperature = 1.5f;
  g.sampling.top_p = 0.95f;
  g.sampling.seed = 11;
  s.reset();
  const auto x = s.generate(prompt, g).tokens;
  s.reset();
  const auto y = s.generate(prompt, g).tokens;
  g.sampling.seed = 12;
  s.reset();
  const auto z = s.generate(prompt, g).tokens;
  CHECK(x == y);
  CHECK(x != z);
  // Refusals.
  s.reset();
  CHECK_THROWS_WITH(s.prefill(std::vector<std::int32_t>(129, 1), false),
                    Catch::Contains("exceeds the compiled sequence length"));
  CHECK_THROWS_WITH(s.prefill({1, 1000000}, false), Catch::Contains("outside the vocabulary"));
  g.sampling.top_p = 0;
  CHECK_THROWS_AS(s.generate(prompt, g), Error);
}

// CRC-32C test vectors: "123456789" (the CRC catalogue's check value) and RFC 3720 appendix
// B.4 (iSCSI): 32 zero bytes, 32 bytes of 0xFF, 32 ascending and 32 descending bytes.
TEST_CASE("crc32c matches the published check values on both paths", "[bundle][crc32c]") {
  auto crc_both = [](const std::vector<unsigned char>& v) {
    const std::span<const std::byte> s(reinterpret_cast<const std::byte*>(v.data()), v.size());
    CHECK(crc32c(s) == crc32c_portable(s));
    return crc32c_portable(s);
  };
  const std::string check = "123456789";
  CHECK(crc_both({check.begin(), check.end()}) == 0xE3069283u);
  CHECK(crc_both(std::vector<unsigned char>(32, 0x00)) == 0x8A9136AAu);
  CHECK(crc_both(std::vector<unsigned char>(32, 0xFF)) == 0x62A8AB43u);
  std::vector<unsigned char> up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i);
    down[static_cast<std::size_t>(i)] = static_cast<unsigned char>(31 - i);
  }
  CHECK(crc_both(up) == 0x46DD794Eu);
  CHECK(crc_both(down) == 0x113FDB5Cu);
  // Any split of the input gives the same value when continued (the chunked writer relies on it).
  std::mt19937_64 rng(3);
  std::vector<std::byte> buf(10007);
  for (auto& b : buf)
    b = static_cast<std::byte>(rng());
  const std::uint32_t whole = crc32c_portable(buf);
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4096},
                          buf.size() - 3, buf.size()}) {
    const std::span<const std::byte> all(buf);
    CHECK(crc32c(all.subspan(cut), crc32c(all.first(cut))) == whole);
  }
}

TEST_CASE("the weight blob is checksummed per chunk and a flipped bit is found",
          "[bundle][crc32c]") {
  const std::string good = bytes_of(compile("qwen3-headdim"));
  const std::uint64_t blob_off = get64(good, 32), blob_size = get64(good, 40);
  {
    TempFile f(good, "crc");
    const auto b = bundle::Bundle::open(f.path);
    CHECK(b->weight_chunk_bytes() == bundle::kWeightChunkBytes);
    const std::uint64_t chunks =
        (blob_size + bundle::kWeightChunkBytes - 1) / bundle::kWeightChunkBytes;
    REQUIRE(b->weight_checksums().size() == chunks);
    // Each stored checksum is the CRC-32C of its chunk of the file (computed here, independently
    // of the writer's streaming code, on the bytes as written).
    for (std::uint64_t k = 0; k < chunks; ++k) {
      const std::uint64_t begin = k * bundle::kWeightChunkBytes;
      const std::uint64_t n = std::min<std::uint64_t>(bundle::kWeightChunkBytes, blob_size - begin);
      CHECK(b->weight_checksums()[k] ==
            crc32c_portable({reinterpret_cast<const std::byte*>(good.data() + blob_off + begin),
                             static_cast<std::size_t>(n)}));
    }
    const auto r = b->verify_weights();
    CHECK(r.chunks == static_cast<std::int64_t>(chunks));
    CHECK(r.bytes == static_cast<std::int64_t>(blob_size));
    CHECK(b->verify_weights(4).chunks == r.chunks); // chunks dealt to threads: the same pass
    // Read into memory instead of mapped (--no-mmap): the same file identity and checksums.
    const auto copy = bundle::Bundle::open(f.path, FileAccess::read);
    CHECK(copy->file_identity() == b->file_identity());
    CHECK(copy->verify_weights(0).chunks == r.chunks);
  }
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 8; ++trial) {
    std::string bad = good;
    const std::size_t at = blob_off + rng() % blob_size;
    bad[at] = static_cast<char>(bad[at] ^ static_cast<char>(1u << (rng() % 8)));
    TempFile f(bad, "crcbad");
    const auto b = bundle::Bundle::open(f.path); // the metadata is intact: it opens
    try {
      (void)b->verify_weights(1 + trial % 3);
      FAIL("a flipped weight bit at blob byte " << at - blob_off << " was not found");
    } catch (const Error& e) {
      const std::uint64_t chunk = (at - blob_off) / bundle::kWeightChunkBytes;
      CHECK_THAT(std::string(e.what()),
                 Catch::Contains("corrupted weights: blob bytes [" +
                                 std::to_string(chunk * bundle::kWeightChunkBytes) + ", "));
      CHECK_THAT(std::string(e.what()), Catch::Contains(f.path.string()));
    }
  }
}

TEST_CASE("a weight check of chosen weights reads the chunks that hold them", "[bundle][crc32c]") {
  const std::string good = bytes_of(compile("qwen3-headdim"));
  const std::uint64_t blob_off = get64(good, 32);
  TempFile f(good, "crcpick");
  const auto b = bundle::Bundle::open(f.path);
  const auto all = b->verify_weights(1);
  const auto none = b->verify_weights(1, [](const ir::Weight&) { return false; });
  CHECK(none.chunks == 0);
  CHECK(none.bytes == 0);
  const auto every = b->verify_weights(2, [](const ir::Weight&) { return true; });
  CHECK(every.chunks == all.chunks);
  CHECK(every.bytes == all.bytes);
  // A flipped bit inside one chosen weight is found when that weight is chosen.
  const ir::Weight* w = nullptr;
  for (const auto& x : b->weights())
    if (x.name.starts_with("layers.1.") && !x.parts.empty() && !x.parts[0].bytes.empty())
      w = &x;
  REQUIRE(w != nullptr);
  const auto at = static_cast<std::uint64_t>(w->parts[0].bytes.data() - b->weight_blob().data());
  std::string bad = good;
  bad[blob_off + at] = static_cast<char>(bad[blob_off + at] ^ 4);
  TempFile g(bad, "crcpickbad");
  const auto c = bundle::Bundle::open(g.path);
  const std::string name = w->name;
  CHECK_THROWS_WITH(c->verify_weights(1, [&](const ir::Weight& x) { return x.name == name; }),
                    Catch::Contains("corrupted weights"));
}
