#include "frontend_test_util.hpp"

#include "tpullm/frontend/goldens.hpp"
#include "tpullm/verify/golden_check.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

using namespace tpullm;
using namespace tpullm::frontend;
using namespace fe_test;
using Catch::Contains;

TEST_CASE("goldens of all seven models load with consistent shapes", "[goldens]") {
  for (const auto& name : model_names()) {
    INFO(name);
    const Goldens g = load_goldens(model_dir(name));
    const std::int64_t v = name == "qwen3-headdim" ? 640 : 512;
    CHECK(g.vocab == v);
    CHECK(g.a.prompt.size() == 37);
    CHECK(g.a.prefill_logits.rows == 37);
    CHECK(g.a.prefill_logits.data.size() == static_cast<std::size_t>(37 * v));
    CHECK(g.a.decode_tokens.size() == 12);
    CHECK(g.a.decode_logits.rows == 12);
    CHECK(g.b.start_position == 49);
    CHECK(g.b.prompt.size() == 23);
    CHECK(g.b.decode_tokens.size() == 6);
    CHECK(g.c.last_only);
    CHECK(g.c.prompt.size() == 300);
    CHECK(g.c.prefill_logits.rows == 1);
    CHECK(g.c.decode_tokens.size() == 8);
    // Greedy: the first decode token is the argmax of the last prefill row.
    for (const GoldenScenario* s : {&g.a, &g.b, &g.c}) {
      const auto last = s->prefill_logits.row(s->prefill_logits.rows - 1);
      const auto arg = std::max_element(last.begin(), last.end()) - last.begin();
      CHECK(arg == s->decode_tokens[0]);
    }
    CHECK(compare_logits(g.a.prefill_logits.data, g.a.prefill_logits).ok);
  }
}

TEST_CASE("golden values", "[goldens]") {
  const Goldens g = load_goldens(model_dir("llama-gqa") / "goldens.safetensors");
  CHECK(g.a.prompt[0] == 0xcd);
  CHECK(g.a.prompt[4] == 0x156);
  CHECK(g.a.decode_tokens[0] == 0x1dd);
  CHECK(g.a.prefill_logits.data[0] == -2.689082384109497f);
  CHECK(g.a.prefill_logits.row(0)[1] == -0.020449114963412285f);
  REQUIRE_THROWS_WITH(g.a.prefill_logits.row(37), Contains("row 37 out of range [0, 37)"));
}

TEST_CASE("compare_logits applies the relative criterion", "[goldens]") {
  GoldenLogits gl{1, 4, {10.f, -20.f, 5.f, 0.f}};
  std::vector<float> ours = {10.f, -20.001f, 5.f, 0.f};
  LogitsMatch r = compare_logits(ours, gl);
  CHECK(r.ok); // 0.001 <= 1e-4 * 20
  CHECK(r.worst_index == 1);
  ours[3] = 0.01f;
  CHECK_FALSE(compare_logits(ours, gl).ok);
  ours[3] = std::nanf("");
  CHECK_FALSE(compare_logits(ours, gl).ok);
  REQUIRE_THROWS_WITH(compare_logits(std::vector<float>(3), gl),
                      Contains("got 3 logits, golden has 4"));
}

TEST_CASE("broken goldens are refused", "[goldens][neg]") {
  TempDir t;
  std::map<std::string, Entry> ts;
  const auto ids = [](std::int64_t n) { return Entry{"I32", {n}, std::string(n * 4, '\0')}; };
  ts["a.prompt"] = ids(3);
  ts["a.prefill_logits"] = make_entry("F32", {3, 8});
  ts["a.decode_tokens"] = ids(2);
  ts["a.decode_logits"] = make_entry("F32", {2, 8});
  ts["b.prompt"] = ids(2);
  ts["b.prefill_logits"] = make_entry("F32", {2, 8});
  ts["b.decode_tokens"] = ids(1);
  ts["b.decode_logits"] = make_entry("F32", {1, 8});
  ts["c.prompt"] = ids(4);
  ts["c.last_logits"] = make_entry("F32", {1, 8});
  ts["c.decode_tokens"] = ids(1);
  ts["c.decode_logits"] = make_entry("F32", {1, 8});
  write_file(t / "goldens.safetensors", make_safetensors(ts));
  const Goldens ok = load_goldens(t.path);
  CHECK(ok.b.start_position == 5);

  SECTION("logits rows != prompt length") {
    ts["b.prefill_logits"] = make_entry("F32", {3, 8});
    write_file(t / "goldens.safetensors", make_safetensors(ts));
    REQUIRE_THROWS_WITH(load_goldens(t.path),
                        Contains("tensor 'b.prefill_logits': shape [3, 8], expected [2, 8]"));
  }
  SECTION("vocab mismatch between tensors") {
    ts["c.decode_logits"] = make_entry("F32", {1, 9});
    write_file(t / "goldens.safetensors", make_safetensors(ts));
    REQUIRE_THROWS_WITH(load_goldens(t.path), Contains("expected [1, 8]"));
  }
  SECTION("missing tensor") {
    ts.erase("c.last_logits");
    write_file(t / "goldens.safetensors", make_safetensors(ts));
    REQUIRE_THROWS_WITH(load_goldens(t.path), Contains("tensor 'c.last_logits' not found"));
  }
  SECTION("token out of vocabulary") {
    std::string b(8, '\0');
    const std::int32_t bad = 8;
    std::memcpy(b.data() + 4, &bad, 4);
    ts["a.decode_tokens"] = Entry{"I32", {2}, b};
    write_file(t / "goldens.safetensors", make_safetensors(ts));
    REQUIRE_THROWS_WITH(load_goldens(t.path), Contains("a: token id 8 outside the vocabulary"));
  }
}

TEST_CASE("verify's KL divergence matches the closed form", "[goldens]") {
  using tpullm::verify::detail::kl_divergence;
  const std::vector<float> same = {1.0f, -2.0f, 0.5f};
  CHECK(kl_divergence(same, same) == Approx(0.0).margin(1e-15));
  // p = softmax(0, ln 3) = (1/4, 3/4), q = softmax(5, 5) = (1/2, 1/2): logits shifts do not matter
  const std::vector<float> p = {0.0f, static_cast<float>(std::log(3.0))}, q = {5.0f, 5.0f};
  const double want = 0.25 * std::log(0.25 / 0.5) + 0.75 * std::log(0.75 / 0.5);
  CHECK(kl_divergence(p, q) == Approx(want).epsilon(1e-6));
  // KL is not symmetric: KL(q || p) = 1/2 ln(2) + 1/2 ln(2/3)
  CHECK(kl_divergence(q, p) ==
        Approx(0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0)).epsilon(1e-6));
}
