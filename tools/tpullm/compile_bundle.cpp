// compile_bundle: checkpoint -> Top modules -> compiled model -> bundle file (atomically).
#include "compile_bundle.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "command.hpp"
#include "tpullm/frontend/stage_builder.hpp"
#include "tpullm/support/output_file.hpp"

namespace tpullm::cli {

namespace fs = std::filesystem;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string mib(std::int64_t b) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << static_cast<double>(b) / (1 << 20) << " MiB";
  return o.str();
}

} // namespace

CompileReport compile_bundle(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                             compiler::CompileOptions options, const fs::path& out, bool progress) {
  CompileReport r;
  const auto t0 = std::chrono::steady_clock::now();
  check(!fs::is_directory(out), ErrorKind::invalid_input, out.string(),
        "is a directory; -o names the bundle file to write");
  refuse_output_over_model_file(out.string(), desc.dir.string());
  // Staged beside the target and renamed over it only on commit (support/output_file.hpp); a
  // bad target (a symbolic link, a device, a missing directory) is refused before the work.
  OutputFile f(out);
  auto modules = frontend::build_top_modules(desc, params);
  const auto p0 = std::chrono::steady_clock::now();
  if (progress)
    options.progress = [p0](std::size_t done, std::size_t total, const std::string& name) {
      if (since(p0) > 1.0 || done == total)
        print_progress("compiled " + name, done, total);
    };
  const auto cm = compiler::compile(std::move(modules), options);
  r.compile_seconds = since(t0);
  r.functions = cm.programs.size();
  r.max_arena = cm.max_arena;
  r.arena_lower_bound = cm.arena_lower_bound;
  r.max_local = cm.max_local;
  r.kv_bytes = cm.kv.bytes();

  const auto t1 = std::chrono::steady_clock::now();
  try {
    r.written = bundle::write_bundle(cm, bundle::make_model_info(desc, params, options.lower.mode),
                                     f.stream());
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::io)
      throw;
    throw OutputError(out.string(), e.message()); // an output failure: exit status 1
  }
  f.commit();
  r.write_seconds = since(t1);
  return r;
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
  return o.str();
}

} // namespace tpullm::cli
