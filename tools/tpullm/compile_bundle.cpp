// compile_bundle: checkpoint -> Top modules -> compiled model -> bundle file (atomically).
#include "compile_bundle.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "command.hpp"
#include "quant_options.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/frontend/hf_config.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/frontend/tensor_parallel.hpp"
#include "tpullm/runtime/bundle_session.hpp"
#include "tpullm/support/output_file.hpp"

namespace tpullm::cli {

namespace fs = std::filesystem;

namespace {

std::string mib(std::int64_t b) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << static_cast<double>(b) / (1 << 20) << " MiB";
  return o.str();
}

/// Whatever compile accepts, the runtime runs: the written bundle `file` is opened by the
/// runtime's loader (every check of Bundle::open, the executor's memory check) and runs one
/// prefill, one prefill_kv when it has them, and one decode step. A failure is compile's
/// refusal (Error(invalid_input) naming `out`), before the bundle replaces anything.
void check_runs(const fs::path& file, const fs::path& out) {
  std::unique_ptr<runtime::BundleSession> engine;
  try {
    engine = std::make_unique<runtime::BundleSession>(file); // the target's cores, as `run` uses
  } catch (const OutputError&) {
    throw;
  } catch (const Error& e) {
    throw Error(ErrorKind::invalid_input, out.string(),
                "the compiled bundle would not run, so it is not written: " + e.message());
  }
  check_session_runs(engine->session(), engine->bundle().model().params.with_history,
                     out.string() + ": the compiled bundle would not run, so it is not written");
}

} // namespace

void check_session_runs(runtime::Session& s, bool with_history, const std::string& what) {
  try {
    // Every prefill variant once without history and once onto a kept cache (prefill_kv),
    // then one decode step: each compiled prefill program has run.
    const auto& p = s.params();
    for (const std::int64_t n : p.prefill_lengths()) {
      s.reset();
      const std::vector<std::int32_t> ids(static_cast<std::size_t>(n), 0);
      (void)s.prefill(ids, false);
      if (with_history && 2 * n <= p.seq_length)
        (void)s.prefill(ids, false);
    }
    if (s.length() >= p.seq_length) // two prefills filled the cache: room for the decode step
      s.truncate(p.seq_length - 1);
    (void)s.decode(0);
    s.reset();
  } catch (const OutputError&) {
    throw;
  } catch (const ModelValueError& e) {
    // The checkpoint's values, whatever the plan: named as the model's failure.
    throw Error(ErrorKind::invalid_input, what,
                "the model fails at " + e.where() + ": " + e.message());
  } catch (const Error& e) {
    throw Error(ErrorKind::invalid_input, what,
                e.message() + " (the plan depends on --tile-rows, --no-layer-groups and the "
                              "target's local_memory)");
  }
}

void check_runnable(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                    const compiler::CompileOptions& options, bool integer_draft) {
  (void)params;
  check(options.tile_rows >= 0, ErrorKind::invalid_input, "--tile-rows", "must be >= 0, got ",
        options.tile_rows);
  check(options.threads >= 0 && options.threads <= 4096, ErrorKind::invalid_input, "--threads",
        "must be in [0, 4096] (0: the target's cores), got ", options.threads);
  // The weight dtypes: each one the lowering knows, and whose element types the target lists.
  const auto& lo = options.lower;
  auto require_target = [&](ir::DType d, const std::string& v, const char* option) {
    check(options.target.supports(d), ErrorKind::invalid_input, option, "the target '",
          options.target.name, "' does not list ", ir::name(d), " among its weight_dtypes",
          d == ir::DType::bf16 || v == ir::name(d) ? "" : str_cat(" (needed by '", v, "')"));
  };
  // The values and how they combine: the quantization plan's rules (conversion/quant_plan.hpp),
  // named as this tool's flags. What the target lists and the kernels run is checked here.
  const conversion::QuantPlan plan = conversion::plan_quant_options(lo, {.flags = true});
  // Each format's element types: its float dtype, or bf16 and the integer codes.
  auto require_format = [&](const conversion::WeightFormat& f, const std::string& v,
                            const char* option) {
    if (f.bits == 0)
      return require_target(f.dtype, v, option);
    require_target(ir::DType::bf16, v, option);
    const bool sym = f.w8a8 || lo.symmetric;
    require_target(f.bits == 8 ? (sym ? ir::DType::i8 : ir::DType::u8)
                               : (sym ? ir::DType::i4 : ir::DType::u4),
                   v, option);
  };
  require_format(plan.linear, lo.mode, "--mode");
  if (!lo.embedding.empty())
    require_format(plan.embedding, lo.embedding, "--embedding-dtype");
  if (!lo.lm_head.empty())
    require_format(plan.lm_head, lo.lm_head, "--lm-head-dtype");
  const bool any_rtn = plan.linear.bits > 0 || plan.embedding.bits > 0 || plan.lm_head.bits > 0;
  check(lo.group_size == 0 || lo.group_size == 32 || lo.group_size == 64 || lo.group_size == 128,
        ErrorKind::invalid_input, "--group-size",
        "must be 32, 64, 128 or 0 (per output channel), got ", lo.group_size);
  check(any_rtn || integer_draft || !lo.symmetric, ErrorKind::invalid_input, "--symmetric",
        "applies only to --mode w8a16 / w4a16, --lm-head-dtype / --embedding-dtype w8 / w4 or "
        "--draft-mode w8a16 / w4a16");
  // int8 against the model: no mixture-of-experts layer under static scales, no linear weight
  // already quantized (the lowering refuses both too, later; here before the work).
  const std::string model = desc.dir.string();
  if (const std::string why = plan.moe_refusal(); !why.empty())
    for (const auto& l : desc.layers)
      check(!l.sparse(), ErrorKind::unsupported, model, why);
  for (const auto& l : desc.layers)
    for (const frontend::WeightRef* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      if (w->is_quantized())
        if (const std::string why = plan.quantized_weight_refusal(w->name()); !why.empty())
          throw Error(ErrorKind::unsupported, model, why);
  const std::int64_t vocab = desc.dims.vocab;
  if (desc.bos_token_id)
    check(*desc.bos_token_id >= 0 && *desc.bos_token_id < vocab, ErrorKind::invalid_input,
          (desc.dir / "config.json").string(), "bos_token_id ", *desc.bos_token_id,
          " is outside the vocabulary [0, ", vocab, ")");
  for (auto e : desc.eos_token_ids)
    check(e >= 0 && e < vocab, ErrorKind::invalid_input, (desc.dir / "config.json").string(),
          "eos_token_id ", e, " is outside the vocabulary [0, ", vocab, ")");
}

void DraftSpec::validate(const frontend::ModelDesc& desc) const {
  check(mode.empty() || mode == "bf16" || mode == "f16" || mode == "w8a16" || mode == "w4a16",
        ErrorKind::invalid_input, "--draft-mode", "must be bf16, f16, w8a16 or w4a16, got '", mode,
        "'");
  check(layers >= 0 && layers <= desc.dims.layers, ErrorKind::invalid_input, "--draft-layers",
        "must be in [0, ", desc.dims.layers, "] (0: every layer), got ", layers);
  check(layers == 0 || !mode.empty(), ErrorKind::invalid_input, "--draft-layers",
        "needs --draft-mode (the draft's weight mode)");
  check(lm_head.empty() || lm_head == "bf16" || lm_head == "f16" || lm_head == "w8" ||
            lm_head == "w4",
        ErrorKind::invalid_input, "--draft-lm-head-dtype", "must be bf16, f16, w8 or w4, got '",
        lm_head, "'");
  check(lm_head.empty() || !mode.empty(), ErrorKind::invalid_input, "--draft-lm-head-dtype",
        "needs --draft-mode (the draft's weight mode)");
  check(act_quant.empty() || act_quant == "dynamic" || act_quant == "none",
        ErrorKind::invalid_input, "--draft-act-quant", "must be dynamic or none, got '", act_quant,
        "'");
  check(act_quant.empty() || !mode.empty(), ErrorKind::invalid_input, "--draft-act-quant",
        "needs --draft-mode (the draft's weight mode)");
}

namespace {

/// The draft model of `draft` as the bytes of a whole bundle: `desc` cut to its first
/// draft.layers layers, compiled with `options`' target, fusions and KV dtype in draft.mode, its
/// embedding and lm_head in draft.lm_head (default: the mode's, bf16 for w8a16 / w4a16: on the
/// Qwen2.5-0.5B preset a w4 lm_head changed the argmax of every drafted position), its
/// integer linears' input as draft.act_quant says, its groups as options' group size and
/// symmetry say.
std::string compile_draft(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                          const compiler::CompileOptions& options, const DraftSpec& draft) {
  frontend::ModelDesc d = desc;
  if (draft.layers > 0) {
    d.dims.layers = draft.layers;
    d.layers.resize(static_cast<std::size_t>(draft.layers));
  }
  compiler::CompileOptions o;
  o.target = options.target;
  o.fusions = options.fusions;
  o.tile_rows = options.tile_rows;
  o.layer_groups = options.layer_groups;
  o.threads = options.threads;
  o.lower.mode = draft.mode;
  o.lower.kv_dtype = options.lower.kv_dtype;
  o.lower.group_size = options.lower.group_size; // --group-size / --symmetric apply to it too
  o.lower.symmetric = options.lower.symmetric;
  o.lower.embedding = o.lower.lm_head = draft.lm_head; // empty: the mode's default
  o.lower.act_quant = draft.act_quant.empty() ? "dynamic" : draft.act_quant; // (integer only)
  check_runnable(d, params, o);
  plan_quantization(d, o.lower, "");
  const auto cm = compiler::compile(frontend::build_top_modules(d, params), o);
  auto info = bundle::make_model_info(d, params, draft.mode);
  info.text = {}; // the model's tokenizer serves both: not stored twice
  std::ostringstream bytes;
  bundle::write_bundle(cm, info, bytes);
  return std::move(bytes).str();
}

} // namespace

CompileReport compile_bundle(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                             compiler::CompileOptions options, const fs::path& out, bool progress,
                             const std::function<void(const CompileReport&)>& before_commit,
                             const std::string& output_option, const DraftSpec& draft,
                             std::int64_t tensor_parallel) {
  CompileReport r;
  const auto t0 = std::chrono::steady_clock::now();
  // Named as the user spelt it: compile's -o is --output, verify's is --bundle.
  const std::string option = output_option == "-o" ? "--output" : output_option;
  check(out != "-", ErrorKind::invalid_input, option,
        "a bundle cannot be written to standard output (it is mapped when it runs); give a file "
        "name");
  std::error_code dir_ec;
  check(!fs::is_directory(out, dir_ec), ErrorKind::invalid_input, out.string(), "is a directory; ",
        output_option, " names the bundle file to write");
  check_runnable(desc, params, options, draft.integer());
  refuse_output_over_model_file(out.string(), desc.dir.string(), option);
  refuse_output_over_input(out.string(), options.lower.calib, "--calib", option);
  // Staged beside the target and renamed over it only on commit (support/output_file.hpp); a
  // bad target (a symbolic link, a device, a missing directory) is refused before the work.
  OutputFile f(out);
  draft.validate(desc);
  std::string draft_bytes;
  if (!draft.mode.empty()) {
    if (progress)
      std::cerr << "compiling the draft model (" << draft.mode << ", "
                << (draft.layers > 0 ? draft.layers : desc.dims.layers) << " of "
                << desc.dims.layers << " layers)..." << std::endl;
    draft_bytes = compile_draft(desc, params, options, draft);
    r.draft_bytes = static_cast<std::int64_t>(draft_bytes.size());
  }
  auto modules = tensor_parallel > 1
                     ? frontend::build_tensor_parallel_modules(desc, params, tensor_parallel)
                     : frontend::build_top_modules(desc, params);
  const auto p0 = std::chrono::steady_clock::now();
  if (progress)
    options.progress = [p0](std::size_t done, std::size_t total, const std::string& name) {
      if (seconds_since(p0) > 1.0 || done == total)
        print_progress("compiled " + name, done, total);
    };
  const auto cm = compiler::compile(std::move(modules), options);
  r.compile_seconds = seconds_since(t0);
  r.functions = cm.programs.size();
  r.max_arena = cm.max_arena;
  r.arena_lower_bound = cm.arena_lower_bound;
  r.max_local = cm.max_local;
  r.kv_bytes = cm.kv.bytes();

  const auto t1 = std::chrono::steady_clock::now();
  bundle::ModelInfo info = bundle::make_model_info(desc, params, options.lower.mode);
  info.tensor_parallel = tensor_parallel;
  try {
    r.written = bundle::write_bundle(
        cm, info, f.stream(),
        std::as_bytes(std::span<const char>(draft_bytes.data(), draft_bytes.size())));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::io)
      throw;
    // The writer sees a failed stream; the system's reason (a full disk: ENOSPC, a file size
    // limit: EFBIG, EIO) is the output file's stream buffer's.
    std::string why = e.message();
    if (const auto* sb = dynamic_cast<const detail::FdStreamBuf*>(f.stream().rdbuf());
        sb && sb->error() != 0)
      why += ": " + detail::errno_text(sb->error());
    throw OutputError(out.string(), why); // an output failure: exit status 1
  }
  r.write_seconds = seconds_since(t1);
  if (!f.staging_path().empty() && tensor_parallel == 1) // a split bundle runs under mpirun
    check_runs(f.staging_path(), out);
  if (before_commit)
    before_commit(r);
  f.commit();
  return r;
}

void default_act_quant(const frontend::ModelDesc& desc, conversion::LowerOptions& lower) {
  if (lower.act_quant.empty())
    lower.act_quant = lower.mode == "int8" || !desc.source_file.empty() ? "dynamic" : "none";
}

frontend::ModelDesc load_checkpoint(const std::string& model, FileAccess access) {
  frontend::LoadOptions load;
  load.access = access;
  return frontend::load_model(model, load);
}

CompileReport compile_checkpoint(const frontend::ModelDesc& desc,
                                 const frontend::StageParams& params,
                                 compiler::CompileOptions options, const std::string& keep_float,
                                 FileAccess access, const fs::path& out, bool progress,
                                 const std::function<void(const CompileReport&)>& before_commit,
                                 const DraftSpec& draft, std::int64_t tensor_parallel) {
  if (tensor_parallel != 1) {
    check_tensor_parallel_options(tensor_parallel, options.lower, keep_float, draft);
    if (const std::string why = frontend::tensor_parallel_refusal(desc, tensor_parallel);
        !why.empty())
      throw Error(ErrorKind::unsupported, desc.dir.string(), why);
  }
  params.validate(desc.dims.max_position);
  draft.validate(desc);
  options.lower.keep_float = keep_float; // checked as given, then mapped to the Top names
  check_runnable(desc, params, options, draft.integer());
  plan_quantization(desc, options.lower, keep_float);
  // Refuse up front what cannot be compiled here, or run from the bundle (its KV cache).
  frontend::check_run_memory(desc, params, access, options.lower.plan->kv_dtype);
  return compile_bundle(desc, params, std::move(options), out, progress, before_commit, "-o", draft,
                        tensor_parallel);
}

void check_tensor_parallel_options(std::int64_t ranks, const conversion::LowerOptions& lower,
                                   const std::string& keep_float, const DraftSpec& draft) {
  const char* opt = "--tensor-parallel";
  check(ranks >= 2 && ranks <= frontend::kMaxTensorParallel, ErrorKind::invalid_input, opt,
        "must be in [2, ", frontend::kMaxTensorParallel, "] (MPI ranks), got ", ranks);
  check(keep_float.empty(), ErrorKind::invalid_input, opt,
        "cannot be combined with --keep-float (it names the unsplit weights)");
  check(lower.calib.empty() && lower.act_quant != "static" && lower.smooth_alpha == 0,
        ErrorKind::invalid_input, opt,
        "cannot be combined with static int8 (--calib, --act-quant static, --smooth-alpha: "
        "calibrated per unsplit weight); use --mode int8 with dynamic activations");
  check(draft.mode.empty(), ErrorKind::invalid_input, opt,
        "cannot be combined with --draft-mode (the self-speculation draft runs whole layers on "
        "one process)");
}

std::string describe(const CompileReport& r) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2);
  o << "compiled " << r.functions << " functions in " << r.compile_seconds << " s, wrote "
    << mib(r.written.file_bytes) << " in " << r.write_seconds << " s\n";
  o << "  weights " << mib(r.written.blob_bytes) << " (" << r.written.unique_parts
    << " arrays stored of " << r.written.weight_parts << " named, " << mib(r.written.deduped_bytes)
    << " deduplicated), metadata " << mib(r.written.meta_bytes) << "\n";
  o << "  memory plan: arena " << mib(r.max_arena) << " (max-live lower bound "
    << mib(r.arena_lower_bound) << ", "
    << (r.max_arena > 0
            ? 100.0 * static_cast<double>(r.arena_lower_bound) / static_cast<double>(r.max_arena)
            : 100.0)
    << "% efficient), local " << mib(r.max_local) << " per core, KV cache " << mib(r.kv_bytes)
    << "\n";
  if (r.draft_bytes > 0)
    o << "  draft model (--draft self): " << mib(r.draft_bytes) << " inside the weights\n";
  return o.str();
}

} // namespace tpullm::cli
