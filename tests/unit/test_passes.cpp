// The pass table, pipeline strings, the pass manager, and the dce / cse / canonicalize passes.
#include "test_data_dir.hpp"
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "tpullm/ir/ir.hpp"
#include "tpullm/pass/pass_manager.hpp"
#include "ir_test_util.hpp"

using namespace tpullm::ir;
using namespace tpullm::ir::top;     // NOLINT: the tests build Top functions
using namespace tpullm::ir::builtin; // NOLINT
using namespace tpullm::pass;

using tpullm_test::decl;
using tpullm_test::op_names;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
const std::string kSourceDir = std::string(TPULLM_TEST_DATA_DIR) + "/../..";

/// `name` in backquotes, as the docs spell code.
std::string backquoted(std::string_view name) {
  std::string s = "`";
  s.append(name).append("`");
  return s;
}

/// x [2, 8]; two reads of weight @w, two identical matmuls, a dead op, a no-op reshape, an
/// unread weight @spare.
Module make_redundant() {
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  Value* x = f.add_argument("x", TensorType({2, 8}, DType::f32));
  Value* w1 = b.weight(decl("w", {8, 8}));
  Value* w2 = b.weight("w");
  Value* a = b.create(MatMulOp{false}, {x, w1});
  Value* c = b.create(MatMulOp{false}, {x, w2});
  b.create(SiLUOp{}, {a}); // dead
  Value* r = b.create(ReshapeOp{{2, 8}}, {c});
  b.ret({b.create(AddOp{}, {a, r})});
  m.add_weight(decl("spare", {4}));
  return m;
}

std::string pipeline_error(const std::string& text) {
  try {
    parse_pipeline(text);
  } catch (const PipelineError& e) {
    return std::to_string(e.column()) + ": " + e.message();
  }
  return "no error";
}

} // namespace

TEST_CASE("the pass table has unique, described passes", "[pass]") {
  std::set<std::string> names;
  for (const auto& p : pass_registry()) {
    CHECK(names.insert(p.name).second);
    CHECK_FALSE(p.description.empty());
    CHECK(find_pass(p.name) == &p);
    for (const auto& o : p.options) {
      CHECK_FALSE(o.help.empty());
      CHECK_FALSE(o.type.empty());
    }
  }
  for (const char* n : {"canonicalize", "cse", "dce"})
    CHECK(names.count(n) == 1);
  CHECK(find_pass("nope") == nullptr);
  const auto* canon = find_pass("canonicalize");
  REQUIRE(canon->options.size() == 2);
  CHECK(canon->options[0].key == "max-iterations");
  CHECK(canon->options[0].type == "int");
  CHECK(canon->options[0].default_value == "10");
}

TEST_CASE("pipelines parse names and typed options", "[pass][pipeline]") {
  auto p =
      parse_pipeline(" canonicalize{ max-iterations = 4 , test-convergence=true } ,cse,dce{} ");
  REQUIRE(p.size() == 3);
  CHECK(p[0].info->name == "canonicalize");
  REQUIRE(p[0].options.size() == 2);
  CHECK(p[0].options[0].key == "max-iterations");
  CHECK(p[0].options[0].value == "4");
  CHECK(p[0].text == "canonicalize{max-iterations=4,test-convergence=true}");
  CHECK(p[2].text == "dce");
  CHECK(parse_pipeline("").empty());
  CHECK(parse_pipeline("   ").empty());
  auto opts = parse_options<CanonicalizeOptions>("canonicalize", {{"max-iterations", "+7", 0, 0}});
  CHECK(opts.max_iterations == 7);
  CHECK_FALSE(opts.test_convergence);
  CHECK(parse_options<DceOptions>("dce", {{"keep-weights", "1", 0, 0}}).keep_weights);
}

TEST_CASE("pipeline errors are clear and point at a column", "[pass][pipeline]") {
  // The list names every registered pass, sorted.
  CHECK(pipeline_error("cse,frobnicate")
            .starts_with("5: unknown pass 'frobnicate' (passes: canonicalize, cse, dce, "));
  CHECK(pipeline_error("dce{keep=true}") ==
        "5: pass 'dce' has no option 'keep' (options: keep-weights)");
  CHECK(pipeline_error("cse{x=1}") == "5: pass 'cse' has no option 'x' (it takes none)");
  CHECK(pipeline_error("canonicalize{max-iterations=many}") ==
        "29: option 'max-iterations' of pass 'canonicalize' expects an integer, got 'many'");
  CHECK(pipeline_error("canonicalize{max-iterations=4x}") ==
        "29: option 'max-iterations' of pass 'canonicalize' expects an integer, got '4x'");
  CHECK(pipeline_error("dce{keep-weights=yes}") ==
        "18: option 'keep-weights' of pass 'dce' expects true or false, got 'yes'");
  CHECK(pipeline_error("dce{keep-weights=true,keep-weights=false}") ==
        "23: option 'keep-weights' of pass 'dce' given twice");
  CHECK(pipeline_error("dce{keep-weights=true") ==
        "22: expected ',' or '}' to close the options of 'dce' opened at column 4");
  CHECK(pipeline_error("dce{keep-weights}") == "17: expected '=' after option 'keep-weights'");
  CHECK(pipeline_error("cse,,dce") == "5: expected a pass name, got ','");
  CHECK(pipeline_error("cse,") == "5: expected a pass name, got end of pipeline");
  CHECK(pipeline_error("cse dce") == "5: expected ',' between passes, got 'd'");
}

TEST_CASE("dce erases dead ops and unread weights", "[pass][dce]") {
  Module m = make_redundant();
  PassManager pm;
  pm.add_pipeline("dce");
  pm.run(m);
  CHECK(op_names(*m.functions()[0]) ==
        std::vector<std::string>{"builtin.Weight", "builtin.Weight", "top.MatMul", "top.MatMul",
                                 "top.Reshape", "top.Add", "builtin.Return"});
  CHECK(m.find_weight("spare") == nullptr);
  CHECK(m.find_weight("w") != nullptr);

  Module k = make_redundant();
  PassManager keep;
  keep.add_pipeline("dce{keep-weights=true}");
  keep.run(k);
  CHECK(k.find_weight("spare") != nullptr);
}

TEST_CASE("dce erases a whole dead chain in one run and keeps Return", "[pass][dce]") {
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  Value* x = f.add_argument("x", TensorType({4}, DType::f32));
  Value* v = x;
  for (int i = 0; i < 5; ++i)
    v = b.create(SiLUOp{}, {v});
  b.create_op(TopKOp{1, 0}, {v});
  b.ret({});
  run_dce(m, {});
  CHECK(op_names(f) == std::vector<std::string>{"builtin.Return"});
}

TEST_CASE("cse merges identical ops and weight reads", "[pass][cse]") {
  Module m = make_redundant();
  run_cse(m, {});
  const Function& f = *m.functions()[0];
  CHECK(op_names(f) == std::vector<std::string>{"builtin.Weight", "top.MatMul", "top.SiLU",
                                                "top.Reshape", "top.Add", "builtin.Return"});
  CHECK(verify_module(m).empty());
}

TEST_CASE("cse keeps ops whose attributes or operands differ", "[pass][cse]") {
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  Value* x = f.add_argument("x", TensorType({2, 8}, DType::f32));
  Value* y = f.add_argument("y", TensorType({2, 8}, DType::f32));
  Value* g = b.weight(decl("g", {8}));
  std::vector<Value*> outs = {
      b.create(RMSNormOp{1e-6f}, {x, g}), b.create(RMSNormOp{1e-5f}, {x, g}), // eps differs
      b.create(SoftmaxOp{0}, {x}),        b.create(SoftmaxOp{1}, {x}),        // axis differs
      b.create(AddOp{}, {x, y}),          b.create(AddOp{}, {y, x}),          // operand order
      b.create(AddOp{}, {x, y}),                                              // duplicate
  };
  b.create_op(TopKOp{2, -1}, {x});
  Operation* t2 = b.create_op(TopKOp{2, -1}, {x}); // duplicate multi-result op
  outs.push_back(t2->result(1));
  b.ret(outs);
  run_cse(m, {});
  CHECK(op_names(f) == std::vector<std::string>{"builtin.Weight", "top.RMSNorm", "top.RMSNorm",
                                                "top.Softmax", "top.Softmax", "top.Add", "top.Add",
                                                "top.TopK", "builtin.Return"});
  const Operation* ret = f.return_op();
  CHECK(ret->operand(6) == ret->operand(4));
  CHECK(ret->operand(7)->defining_op()->is<TopKOp>());
  CHECK(verify_module(m).empty());
}

TEST_CASE("canonicalize, cse and dce together clean the module", "[pass]") {
  Module m = make_redundant();
  PassManagerConfig cfg;
  cfg.timing = true;
  PassManager pm(cfg);
  pm.add_pipeline("canonicalize,cse,dce");
  CHECK(pm.pipeline() == "canonicalize,cse,dce");
  pm.run(m);
  CHECK(op_names(*m.functions()[0]) ==
        std::vector<std::string>{"builtin.Weight", "top.MatMul", "top.Add", "builtin.Return"});
  CHECK(m.weights().size() == 1);
  std::ostringstream report;
  pm.print_timing(report);
  for (const char* s : {"canonicalize", "cse", "dce", "(verifier, after each pass)", "total"})
    CHECK(report.str().find(s) != std::string::npos);
  REQUIRE(pm.timings().size() == 3);
  CHECK(pm.timings()[0].pass == "canonicalize");
}

TEST_CASE("canonicalize fails on non-convergence only when asked", "[pass][canonicalize]") {
  Module m("m");
  Function& f = m.add_function("f");
  Builder b(m, f);
  Value* x = f.add_argument("x", TensorType({2, 3, 4}, DType::f32));
  Value* v = x;
  for (int i = 0; i < 4; ++i)
    v = b.create(ReshapeOp{{i % 2 ? 6 : 3, i % 2 ? 4 : 8}}, {v});
  b.ret({v});
  PassManager strict;
  strict.add_pipeline("canonicalize{max-iterations=1,test-convergence=true}");
  CHECK_THROWS_WITH(strict.run(m), Catch::Contains("pass 'canonicalize' failed: canonicalize did "
                                                   "not converge after 1 iterations"));
  PassManager bad;
  bad.add_pipeline("canonicalize{max-iterations=0}");
  CHECK_THROWS_WITH(bad.run(m), Catch::Contains("max-iterations must be >= 1"));
  PassManager ok;
  ok.add_pipeline("canonicalize{test-convergence=true}");
  ok.run(m);
  CHECK(op_names(f) == std::vector<std::string>{"top.Reshape", "builtin.Return"});
}

TEST_CASE("verify-each blames the pass that broke the IR", "[pass][verify]") {
  // A buggy pass that moves the first op to the end: uses now precede definitions (a verifier
  // error the text format cannot even express).
  auto break_order = [](Module& m) {
    auto& ops = m.functions()[0]->ops();
    ops.splice(ops.end(), ops, ops.begin());
  };
  {
    Module m = make_redundant();
    PassManager pm;
    pm.add_pipeline("cse").add("break-order", break_order).add_pipeline("dce");
    try {
      pm.run(m);
      FAIL("expected a PassFailure");
    } catch (const PassFailure& e) {
      CHECK(e.pass() == "break-order");
      REQUIRE_FALSE(e.diagnostics().empty());
      CHECK_THAT(e.diagnostics()[0].message(),
                 Catch::StartsWith("after pass 'break-order': 'top.MatMul' operand #1 is not "
                                   "defined before its use in @f"));
    }
  }
  {
    Module m = make_redundant();
    PassManagerConfig cfg;
    cfg.verify_each = false;
    PassManager pm(cfg);
    pm.add("break-order", break_order);
    CHECK_NOTHROW(pm.run(m));
    CHECK_FALSE(verify_module(m).empty());
  }
}

TEST_CASE("the pass manager verifies its input and reports throwing passes", "[pass][verify]") {
  Module m = make_redundant();
  m.functions()[0]->set_result_types({TensorType({3}, DType::f32)});
  PassManager pm;
  pm.add_pipeline("cse");
  try {
    pm.run(m);
    FAIL("expected a PassFailure");
  } catch (const PassFailure& e) {
    CHECK(e.pass().empty());
    CHECK_THAT(e.what(), Catch::Contains("input IR does not verify: 'builtin.Return' value #0"));
  }
  Module ok = make_redundant();
  PassManager throwing;
  throwing.add("explode", [](Module&) { throw std::runtime_error("boom"); });
  CHECK_THROWS_WITH(throwing.run(ok), Catch::Contains("pass 'explode' failed: boom"));
}

TEST_CASE("print-after prints after all or the named passes", "[pass]") {
  for (std::string which : {"cse", "all"}) {
    Module m = make_redundant();
    std::ostringstream os;
    PassManagerConfig cfg;
    cfg.print_after = {which};
    cfg.print_stream = &os;
    PassManager pm(cfg);
    pm.add_pipeline("canonicalize,cse,dce{keep-weights=true}");
    pm.run(m);
    const std::string out = os.str();
    CHECK(out.find("// ----- IR after pass 'cse' -----\nmodule @m {") != std::string::npos);
    const bool all = which == "all";
    CHECK((out.find("IR after pass 'canonicalize'") != std::string::npos) == all);
    CHECK((out.find("IR after pass 'dce{keep-weights=true}'") != std::string::npos) == all);
  }
}

TEST_CASE("every op kind has a round-trip case in tests/ir", "[ir][text][roundtrip]") {
  std::set<OpKind> seen;
  for (const char* file : {"roundtrip.tir", "roundtrip-tpu.tir"}) {
    const std::string path = kSourceDir + "/tests/ir/text/" + file;
    Module m = text::parse_module(read_text(path), path);
    REQUIRE(verify_module(m).empty());
    for (const auto& f : m.functions())
      for (const auto& op : f->ops())
        seen.insert(op->kind());
    const std::string once = text::print_module(m);
    CHECK(text::print_module(text::parse_module(once, "printed")) == once);
  }
  for (std::size_t k = 0; k < kNumOpKinds; ++k) {
    INFO("op without a round-trip case: " << kOpNames[k]);
    CHECK(seen.count(static_cast<OpKind>(k)) == 1);
  }
}

TEST_CASE("the docs name every op and every pass", "[docs]") {
  const std::string ir = read_text(kSourceDir + "/docs/ir.md");
  for (auto name : kOpNames) {
    INFO("docs/ir.md does not describe " << name);
    CHECK(ir.find(backquoted(name)) != std::string::npos);
  }
  const std::string passes = read_text(kSourceDir + "/docs/passes.md");
  for (const auto& p : pass_registry()) {
    INFO("docs/passes.md does not describe pass " << p.name);
    CHECK(passes.find(backquoted(p.name)) != std::string::npos);
    for (const auto& o : p.options)
      CHECK(passes.find(backquoted(o.key)) != std::string::npos);
  }
}
