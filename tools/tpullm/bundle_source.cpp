// The BUNDLE argument of run / chat / serve / bench: a bundle, or a checkpoint folder or GGUF file
// compiled once into the bundle cache (bundle_source.hpp).
#include "bundle_source.hpp"

#include <malloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "compile_bundle.hpp"
#include "tpullm/conversion/lower_to_tpu.hpp"
#include "tpullm/frontend/gguf.hpp"
#include "tpullm/frontend/memory_estimate.hpp"
#include "tpullm/support/crc32c.hpp"
#include "tpullm/support/mapped_file.hpp"
#include "tpullm/support/output_file.hpp"
#include "tpullm/support/temp_file.hpp"

namespace tpullm::cli {

namespace fs = std::filesystem;

namespace {

/// FNV-1a 64 of `text`, continuing from `h`.
std::uint64_t fnv1a64(std::string_view text, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (const char c : text)
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

std::string hex64(std::uint64_t v) {
  std::ostringstream o;
  o << std::hex << std::setw(16) << std::setfill('0') << v;
  return o.str();
}

/// The first bytes of a regular file (fewer when it is shorter).
std::string head_bytes(const fs::path& p, std::size_t n) {
  std::ifstream in(p, std::ios::binary);
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return s;
}

/// What tells this tpullm build apart from another: the size and modification time of the
/// running executable (a rebuilt compiler may compile differently, so its bundles are not
/// reused), and the bundle format version.
std::string tool_identity() {
  struct stat st {};
  std::ostringstream o;
  o << "format " << bundle::kFormatVersion;
  if (::stat("/proc/self/exe", &st) == 0)
    o << "; tool " << st.st_size << " " << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec;
  return o.str();
}

/// The cache file's name: the source's name (letters, digits, '.', '_', '-'; at most 64) and
/// the key.
std::string cache_file_name(const fs::path& source, const std::string& key) {
  fs::path p = source;
  if (p.filename().empty())
    p = p.parent_path();
  std::string stem = p.filename() == ".." || p.filename() == "." || p.filename().empty()
                         ? fs::absolute(p).lexically_normal().filename().string()
                         : p.stem().string();
  if (stem.empty())
    stem = "model";
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      c = '_';
  if (stem.size() > 64)
    stem.resize(64);
  return stem + "-" + key + ".bundle";
}

/// Rethrows an output failure of the cache as one line naming the file and what to do.
[[noreturn]] void cache_write_failed(const fs::path& file, const OutputError& e) {
  throw OutputError(file.string(),
                    "cannot write the compiled bundle into the bundle cache: " + e.message() +
                        " (free some space, set XDG_CACHE_HOME to another directory, or run "
                        "with --no-cache)");
}

void print_compiled(const CompileReport& r) {
  const std::string d = describe(r);
  std::cerr << d.substr(0, d.find('\n')) << "\n";
}

} // namespace

bool parse_bundle_command(const std::vector<std::string>& args, po::options_description& o,
                          BundleArgs& a, po::variables_map& vm) {
  o.add_options()("bundle", po::value(&a.source)->required(),
                  "a bundle file (from tpullm compile), or a checkpoint folder (config.json + "
                  "safetensors) or a .gguf file, compiled on first use into the bundle cache")(
      "threads", po::value(&a.threads)->default_value(0),
      "cores to run on (0: the bundle target's, at most the CPUs this process may use)");
  po::options_description s("when BUNDLE is a checkpoint folder or a GGUF file (compiled once, "
                            "cached in ${XDG_CACHE_HOME:-~/.cache}/tpullm/bundles)");
  s.add_options()("no-cache", po::bool_switch(&a.no_cache),
                  "compile into a temporary file, removed once opened, instead of the cache")(
      "seq-length", po::value(&a.seq_length),
      "KV-cache capacity (positions) to compile for (default: the model's context length, at "
      "most 4096 and what fits in half the memory)")(
      "mode", po::value(&a.mode),
      "weights of the linear and MLP layers, as tpullm compile --mode (default: f32)")(
      "act-quant", po::value(&a.act_quant),
      "activation quantization, as tpullm compile --act-quant (default: dynamic for a GGUF "
      "file: x rounded to int8 per weight group where the weights are integer; none otherwise)");
  o.add(bundle_open_options(a.open));
  o.add(s);
  if (!parse_command_line(args, o, "bundle", vm))
    return false;
  check(a.threads >= 0 && a.threads <= 4096, ErrorKind::invalid_input, "--threads",
        "must be in [0, 4096] (0: the bundle target's), got ", a.threads);
  check_bundle_open_options(a.open); // before a source is compiled for minutes
  check(!vm.count("seq-length") || a.seq_length > 0, ErrorKind::invalid_input, "--seq-length",
        "must be > 0, got ", a.seq_length);
  check(!vm.count("mode") || !a.mode.empty(), ErrorKind::invalid_input, "--mode",
        "must name a mode (f32, bf16, f16, w8a16, w4a16 or int8)");
  check(!vm.count("act-quant") || !a.act_quant.empty(), ErrorKind::invalid_input, "--act-quant",
        "must be none or dynamic");
  return true;
}

SourceKind classify_source(const fs::path& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  const char* expected = "expected a bundle file (from tpullm compile), a checkpoint folder "
                         "(config.json + safetensors), a .gguf file or a folder holding one";
  if (fs::is_directory(st)) {
    if (fs::is_regular_file(path / "config.json", ec))
      return SourceKind::checkpoint;
    bool gguf = false;
    for (const auto& e : fs::directory_iterator(path, ec))
      gguf = gguf || e.path().extension() == ".gguf";
    check(gguf, ErrorKind::invalid_input, path.string(),
          "is a directory without config.json or a .gguf file; ", expected);
    (void)frontend::gguf_source(path); // compile's rule: exactly one GGUF file in it
    return SourceKind::gguf;
  }
  if (!fs::is_regular_file(st))
    return SourceKind::bundle; // missing, a FIFO, a device: Bundle::open says which, unblocked
  if (frontend::GgufFile::looks_like_gguf(path))
    return SourceKind::gguf;
  // A bundle starts with "TPULLMB\0" (docs/bundle.md); anything else is none of the three.
  const std::string head = head_bytes(path, 8);
  check(head.size() == 8 && head.compare(0, 7, "TPULLMB") == 0 && head[7] == '\0',
        ErrorKind::invalid_input, path.string(),
        "is not a tpullm bundle, a checkpoint folder or a GGUF file; ", expected);
  return SourceKind::bundle;
}

frontend::StageParams source_params(const frontend::ModelDesc& desc, std::int64_t requested,
                                    ir::DType kv_dtype) {
  auto with_seq = [](std::int64_t seq) {
    frontend::StageParams p;
    p.seq_length = seq;
    p.max_input_length = std::max<std::int64_t>(1, std::min<std::int64_t>(256, seq / 2));
    p.decode_chunk = std::min<std::int64_t>(128, seq); // compile's --decode-chunk default
    p.prefill_auto = true;                             // compile's --prefill-lengths auto
    p.with_history = true;
    return p;
  };
  if (requested > 0)
    return with_seq(requested);
  const std::int64_t context = desc.dims.max_position > 0 ? desc.dims.max_position : 4096;
  std::int64_t seq = std::min<std::int64_t>(context, 4096);
  const double budget = frontend::memory_limit_bytes() / 2;
  while (seq > 256 && frontend::estimate_memory(desc, with_seq(seq), frontend::Workload::run,
                                                FileAccess::map, kv_dtype)
                              .total() > budget)
    seq /= 2;
  return with_seq(seq);
}

std::string source_content_hash(const fs::path& source, SourceKind kind) {
  std::vector<fs::path> files;
  if (kind == SourceKind::gguf) {
    files.push_back(*frontend::gguf_source(source)); // the file, or the one in the folder
  } else {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(source, ec)) {
      const std::string ext = e.path().extension().string();
      std::error_code fec;
      if ((ext == ".json" || ext == ".safetensors" || ext == ".jinja") &&
          fs::is_regular_file(e.path(), fec))
        files.push_back(e.path());
    }
    check(!ec, ErrorKind::io, source.string(), "cannot list the folder: ", ec.message());
    std::sort(files.begin(), files.end());
  }
  std::uint64_t h = fnv1a64("tpullm source v1\n");
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    std::uint32_t crc = 0;
    if (!ec && size > 0)
      crc = crc32c(MappedFile::open(f)->bytes());
    h = fnv1a64(str_cat(f.filename().string(), " ", ec ? 0 : size, " ", crc, "\n"), h);
  }
  return hex64(h);
}

fs::path bundle_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg && fs::path(xdg).is_absolute())
    return fs::path(xdg) / "tpullm" / "bundles";
  const char* home = std::getenv("HOME");
  check(home && *home, ErrorKind::invalid_input, "bundle cache",
        "neither XDG_CACHE_HOME (absolute) nor HOME is set; set one, or run with --no-cache");
  return fs::path(home) / ".cache" / "tpullm" / "bundles";
}

OpenedBundle open_bundle_source(const BundleArgs& a, bool verbose, std::string* checked) {
  const SourceKind kind = classify_source(a.source);
  auto open = [&](const fs::path& file) {
    return open_bundle(file.string(), a.open, a.threads, checked);
  };
  if (kind == SourceKind::bundle) {
    for (const auto& [given, option] : {std::pair{a.no_cache, "--no-cache"},
                                        {a.seq_length != 0, "--seq-length"},
                                        {!a.mode.empty(), "--mode"},
                                        {!a.act_quant.empty(), "--act-quant"}})
      check(!given, ErrorKind::invalid_input, option,
            "applies only when BUNDLE is a checkpoint folder or a GGUF file ('", a.source,
            "' is a bundle, compiled with its own)");
    return {open(a.source), a.source, a.source, false};
  }
  // The same path as `tpullm compile`, with this machine's target and the defaults above.
  const frontend::ModelDesc desc = load_checkpoint(a.source, FileAccess::map);
  compiler::CompileOptions copts;
  if (!a.mode.empty())
    copts.lower.mode = a.mode;
  copts.lower.act_quant = a.act_quant;
  default_act_quant(desc, copts.lower);
  (void)conversion::plan_quant_options(copts.lower, {true}); // a bad option before the work
  const auto params = source_params(desc, a.seq_length, conversion::kv_cache_dtype(copts.lower));
  const std::string aq = copts.lower.act_quant;
  const std::string what =
      str_cat("mode ", copts.lower.mode, aq == "none" ? "" : ", act-quant " + aq, ", seq_length ",
              params.seq_length, ", max_input_length ", params.max_input_length);
  auto compile_into = [&](const fs::path& out) {
    std::cerr << "compiling " << a.source << " for this machine (" << what << ") into "
              << out.string() << "\n";
    compile_checkpoint(desc, params, copts, "", FileAccess::map, out, true, print_compiled);
    ::malloc_trim(0); // the compiler's freed memory back to the system before the run
  };
  if (a.no_cache) {
    TemporaryFile tmp(temp_directory(), "tpullm-run-", ".bundle");
    compile_into(tmp.path());
    return {open(tmp.path()), a.source, {}, true}; // mapped: the file may go
  }
  // The key: what the source holds, what compiles it (this build, the target) and how.
  std::ostringstream k;
  k << "tpullm bundle cache v1\n"
    << tool_identity() << "\nsource " << (kind == SourceKind::gguf ? "gguf " : "checkpoint ")
    << source_content_hash(a.source, kind) << "\nseq_length " << params.seq_length
    << " max_input_length " << params.max_input_length << " decode_chunk " << params.decode_chunk
    << " prefill auto history 1\nmode " << copts.lower.mode << " act-quant "
    << copts.lower.act_quant << "\ntarget " << copts.target.to_json() << "\n";
  const fs::path dir = bundle_cache_dir();
  const fs::path file = dir / cache_file_name(a.source, hex64(fnv1a64(k.str())));
  std::error_code ec;
  if (fs::exists(file, ec)) {
    try {
      auto b = open(file); // a flipped weight bit included: compiled again
      if (verbose)
        std::cerr << "using the cached bundle " << file.string() << " (compiled from " << a.source
                  << ")\n";
      return {std::move(b), a.source, file, false};
    } catch (const Error& e) {
      std::cerr << "the cached bundle cannot be used (" << e.what() << "); compiling again\n";
    }
  }
  fs::create_directories(dir, ec);
  if (ec)
    throw OutputError(dir.string(),
                      "cannot create the bundle cache directory: " + ec.message() +
                          " (set XDG_CACHE_HOME to a writable directory, or run with --no-cache)");
  try {
    compile_into(file);
  } catch (const OutputError& e) {
    cache_write_failed(file, e);
  }
  return {open(file), a.source, file, true};
}

} // namespace tpullm::cli
