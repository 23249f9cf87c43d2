#pragma once
// The BUNDLE argument of every command that runs a model (run, chat, serve, bench) and the options
// that go with it, parsed and resolved in this one place: a bundle file is opened as it is; a
// checkpoint folder (config.json) or a GGUF file is compiled once with the defaults below into
// the bundle cache (${XDG_CACHE_HOME:-~/.cache}/tpullm/bundles, keyed by the source's content and
// the options) and reused on the next call. Either way the bundle file is then opened through
// open_bundle (command.hpp: --no-mmap, the weight check). docs/cli.md "Running a checkpoint or a
// GGUF".
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "command.hpp"
#include "tpullm/bundle/bundle.hpp"
#include "tpullm/compiler/compiler.hpp"
#include "tpullm/frontend/model_desc.hpp"
#include "tpullm/frontend/stage_params.hpp"

namespace tpullm::cli {

/// The options of a command that runs a bundle: what BUNDLE names, the cores to run on, how the
/// bundle file is opened, and how a source (a checkpoint folder or a GGUF file) is compiled first.
struct BundleArgs {
  std::string source;          ///< BUNDLE as given: a bundle file, a checkpoint folder or a .gguf
  std::int64_t threads = 0;    ///< --threads: cores to run on (0: the bundle target's)
  BundleOpenOptions open;      ///< --no-mmap, --verify-weights, --no-verify-weights
  bool no_cache = false;       ///< --no-cache: compile a source into a temporary file
  std::int64_t seq_length = 0; ///< --seq-length for a source (0: chosen, see source_params)
  std::string mode;            ///< --mode for a source (empty: compile's default, f32)
  std::string act_quant;       ///< --act-quant for a source (empty: default_act_quant's)
};

/// What kind of path BUNDLE is.
enum class SourceKind {
  bundle,     ///< a tpullm bundle file (or anything else that is not a source: Bundle::open judges)
  checkpoint, ///< a folder with config.json
  gguf,       ///< a regular file starting with the GGUF magic, or a folder holding one .gguf
};

/// Parses `<command> BUNDLE [options]` (kOptionStyle) into `a` and `vm`: adds to `o` the
/// positional BUNDLE, --threads, the open options (bundle_open_options) and the source options
/// (--no-cache, --seq-length, --mode), and checks them (--threads in [0, 4096]; not both
/// --verify-weights and --no-verify-weights; the source options only for a checkpoint or GGUF).
/// Returns false after printing help (nothing else to do).
bool parse_bundle_command(const std::vector<std::string>& args, po::options_description& o,
                          BundleArgs& a, po::variables_map& vm);

/// What `path` is (reads at most 4 bytes of a regular file; never opens a FIFO or a device).
/// Throws Error(invalid_input) naming the path, in one line saying what was expected, for a
/// directory without config.json or .gguf files (or with several: frontend::gguf_source) and for
/// a regular file that is neither a bundle nor a GGUF.
SourceKind classify_source(const std::filesystem::path& path);

/// The stage parameters a source is compiled with when `run` & co. compile it: seq_length
/// `requested` when given (> 0), else the model's context length capped at 4096 and halved
/// while the compile-and-run memory estimate exceeds half of what this process may use (not
/// below 256); max_input_length min(256, seq_length / 2); decode variants by halving down to
/// 128 and the automatic prefill variants, as `tpullm compile` picks; prefill_kv built.
frontend::StageParams source_params(const frontend::ModelDesc& desc, std::int64_t requested,
                                    ir::DType kv_dtype);

/// The 64-bit content hash of a source as 16 hex digits: name, size and CRC-32C of every file
/// the compile reads (a folder's *.json, *.safetensors and *.jinja files; a GGUF file itself, or
/// the one .gguf file of a folder).
std::string source_content_hash(const std::filesystem::path& source, SourceKind kind);

/// The bundle cache directory: $XDG_CACHE_HOME/tpullm/bundles when XDG_CACHE_HOME is an
/// absolute path, else $HOME/.cache/tpullm/bundles. Throws Error(invalid_input) when neither
/// is set.
std::filesystem::path bundle_cache_dir();

/// A bundle ready to run: the file given, or the one compiled from a source.
struct OpenedBundle {
  std::shared_ptr<const bundle::Bundle> bundle; ///< opened, validated, weights checked
  std::string name;                             ///< how messages name it: the path given
  std::filesystem::path file; ///< the bundle file (a --no-cache bundle's is already removed)
  bool compiled = false;      ///< compiled by this call (not found in the cache)
};

/// Opens what `a.source` names through open_bundle (`a.open`, on `a.threads` threads; `checked`,
/// when given, receives its "weights: ..." line). A bundle file is opened as is. A checkpoint
/// folder or GGUF file is looked up in the bundle cache under its content hash and the compile
/// options (this machine's target, source_params, the mode) and compiled there on a miss through
/// the same path as `tpullm compile` (compile_checkpoint), progress on stderr; with --no-cache it
/// is compiled into a temporary file that is removed once opened. A cached bundle that cannot be
/// opened or fails its weight check is compiled again. `verbose`: say on stderr which cached
/// bundle is used. A cache that cannot be created or written (a full disk included) is one line
/// naming the path (OutputError, exit 1), and leaves no partial file.
OpenedBundle open_bundle_source(const BundleArgs& a, bool verbose = true,
                                std::string* checked = nullptr);

} // namespace tpullm::cli
