#pragma once
/// The deployable bundle (docs/bundle.md): one file holding a compiled model, every function's
/// Programs with their plans and buffers, the model and stage parameters the runtime needs, the
/// target the plans assume, and one deduplicated, 64-byte aligned weight blob. Layout:
///
///   [0, 64)          header: magic "TPULLMB\0", format version, offsets and sizes below
///   [meta, +size)    metadata: a FlatBuffer (schema src/bundle/bundle.fbs), verified on load
///   [blob, +size)    weight blob, 64-byte aligned start; every weight part is a range of it
///
/// A bundle is opened by mmap and its weights are used in place (no copy). Every count, offset
/// and size is validated on open; anything wrong is refused with Error(invalid_input) naming the
/// file and what is wrong. Writing is deterministic: the same compiled model gives the same bytes.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <ostream>
#include <string>
#include <vector>

#include "tpullm/codegen/compiled_model.hpp"
#include "tpullm/frontend/stage_params.hpp"
#include "tpullm/frontend/text_files.hpp"
#include "tpullm/ir/module.hpp"
#include "tpullm/memory/kv_geometry.hpp"
#include "tpullm/support/input_file.hpp"
#include "tpullm/support/mapped_file.hpp"
#include "tpullm/target/target.hpp"

namespace tpullm::frontend {
struct ModelDesc;
}

namespace tpullm::bundle {

/// Format version written into the header; a bundle of another version is refused.
inline constexpr std::uint32_t kFormatVersion = 1;
/// Bytes of the fixed header, and the alignment of the weight blob and of every weight part.
inline constexpr std::int64_t kHeaderBytes = 64, kBlobAlignment = 64;
/// The weight blob is checksummed (CRC-32C, support/crc32c.hpp) per chunk of this many bytes,
/// so a lazily mapped run can verify what it touches without reading the whole blob.
inline constexpr std::uint64_t kWeightChunkBytes = std::uint64_t{4} << 20;

/// What Bundle::verify_weights() checked.
struct WeightCheck {
  std::int64_t chunks = 0; ///< chunks verified
  std::int64_t bytes = 0;  ///< blob bytes read
  double seconds = 0;      ///< time taken
};

/// What the runtime needs to know about the model besides its functions.
struct ModelInfo {
  std::string family; ///< llama, qwen2, qwen3
  std::int64_t layers = 0, hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, head_dim = 0,
               vocab = 0;                  ///< dimensions
  frontend::StageParams params;            ///< seq_length, max_input_length, decode variants
  std::int64_t bos_token_id = -1;          ///< -1: none
  std::vector<std::int64_t> eos_token_ids; ///< stop tokens (any of them)
  std::string mode;                        ///< weight dtype of linear layers: f32, bf16, f16
  std::string source;                      ///< checkpoint directory name (informational)
  frontend::TextFiles text;                ///< tokenizer files as compiled in (empty: none)
  /// Ranks the layers are split over by tensor parallel (compile --tensor-parallel N): 1 for an
  /// ordinary bundle. With N > 1 the bundle has no block_* functions: rank r runs
  /// StageNames::tp_attention(r, ..) and tp_mlp(r, ..), and the KV cache keeps
  /// frontend::tp_kv_heads(kv_heads, N) heads per position (runtime/tensor_parallel.hpp).
  std::int64_t tensor_parallel = 1;
};

/// The ModelInfo of checkpoint `desc` compiled with `params` in weight mode `mode`, with the
/// checkpoint's tokenizer files (frontend::read_text_files) when it has them.
ModelInfo make_model_info(const frontend::ModelDesc& desc, const frontend::StageParams& params,
                          const std::string& mode);

/// Figures of a written bundle.
struct WriteStats {
  std::int64_t file_bytes = 0;    ///< whole file
  std::int64_t meta_bytes = 0;    ///< FlatBuffer metadata
  std::int64_t blob_bytes = 0;    ///< weight blob (after deduplication, with alignment padding)
  std::int64_t weight_parts = 0;  ///< weight parts named by the functions
  std::int64_t unique_parts = 0;  ///< distinct parts stored
  std::int64_t deduped_bytes = 0; ///< bytes saved by storing identical parts once
};

/// Writes `model` (every function and every weight its programs read) with `info` to `out`,
/// with `draft` (the bytes of a whole bundle written before, e.g. by write_bundle into a string;
/// empty: none) embedded as the draft model of self-speculation (Bundle::draft()). Throws
/// Error(io) when a write fails, Error(invalid_input) when a weight has no data.
WriteStats write_bundle(const codegen::CompiledModel& model, const ModelInfo& info,
                        std::ostream& out, std::span<const std::byte> draft = {});

/// An opened bundle: validated metadata decoded into Programs, weights whose bytes point into
/// the mapping (kept alive by every Weight's parts), the model info and the target.
class Bundle {
public:
  /// Maps (or with FileAccess::read, the tools' `--no-mmap`, reads into memory) and validates
  /// `path`. Throws Error(io) when it cannot be read, Error(invalid_input) naming the file and
  /// the first problem (not a bundle, version, truncation, a bad offset, a program whose types
  /// or buffers do not check, a target this machine cannot run).
  static std::shared_ptr<const Bundle> open(const std::filesystem::path& path,
                                            FileAccess access = FileAccess::map);

  const ModelInfo& model() const { return model_; }        ///< model and stage params
  const target::Target& target() const { return target_; } ///< what the plans assume
  const memory::KvGeometry& kv() const { return kv_; }     ///< KV cache of every program
  const std::vector<codegen::Program>& programs() const { return programs_; } ///< in order
  const std::vector<ir::Weight>& weights() const { return weights_; }         ///< sorted by name
  /// The weight `name`, or null (binary search: weights are sorted by name).
  const ir::Weight* find_weight(const std::string& name) const;
  std::int64_t file_bytes() const { return file_bytes_; } ///< size of the file
  std::int64_t blob_bytes() const { return blob_bytes_; } ///< size of the weight blob
  /// The weight blob in the file's mapping [blob_bytes()] (or the copy read with --no-mmap);
  /// valid while the bundle lives.
  std::span<const std::byte> weight_blob() const { return blob_; }
  std::int64_t max_arena() const { return max_arena_; }           ///< largest activation arena
  std::int64_t max_local() const { return max_local_; }           ///< largest per-core local
  std::int64_t arena_lower_bound() const { return lower_bound_; } ///< max-live lower bound
  std::uint32_t version() const { return version_; }              ///< format version
  /// Bytes per checksummed chunk of the weight blob.
  std::uint64_t weight_chunk_bytes() const { return chunk_bytes_; }
  /// CRC-32C of each chunk of the weight blob, as written by the compiler.
  const std::vector<std::uint32_t>& weight_checksums() const { return chunk_crcs_; }
  /// The draft model embedded by `compile --draft-mode` (a bundle of its own over a range of
  /// this one's weight blob, decoded and validated with this one), or null.
  const std::shared_ptr<const Bundle>& draft() const { return draft_; }

  /// Reads the whole weight blob and checks every chunk against its CRC-32C (open() checks the
  /// metadata, not the weights: that would read the whole file), chunks dealt to `threads`
  /// threads (0: the cores this process may use). Throws Error(invalid_input) naming the file,
  /// the first bad chunk's byte range and a weight stored in it (the lowest bad chunk, whatever
  /// the thread count).
  WeightCheck verify_weights(std::int64_t threads = 1) const;
  /// verify_weights() of the chunks that hold a byte of a weight `which` accepts (a pipeline
  /// rank's own weights); every chunk when `which` is empty. Same errors.
  WeightCheck verify_weights(std::int64_t threads,
                             const std::function<bool(const ir::Weight&)>& which) const;
  /// The path the bundle was opened from.
  const std::string& path() const { return path_; }
  /// The opened file's identity (fstat on the descriptor its bytes came from).
  const FileIdentity& file_identity() const { return identity_; }
  const std::string& compiler() const { return compiler_; } ///< "tpullm <version>"
  /// The header's checksum of the metadata, which holds every program, the parameters and the
  /// weight blob's chunk checksums: two bundles with the same value have the same content (what
  /// the ranks of a pipeline run compare, runtime/layer_pipeline.hpp).
  std::uint64_t metadata_checksum() const { return meta_checksum_; }

  /// Use open(); public for std::make_shared.
  Bundle() = default;

private:
  friend struct BundleReader;
  ModelInfo model_;
  target::Target target_;
  memory::KvGeometry kv_;
  std::vector<codegen::Program> programs_;
  std::vector<ir::Weight> weights_;
  std::int64_t file_bytes_ = 0, blob_bytes_ = 0, max_arena_ = 0, max_local_ = 0, lower_bound_ = 0;
  std::uint32_t version_ = 0;
  std::string compiler_;
  std::string path_;
  FileIdentity identity_;
  std::uint64_t chunk_bytes_ = 0, meta_checksum_ = 0;
  std::vector<std::uint32_t> chunk_crcs_;
  std::span<const std::byte> blob_;     ///< the blob in the mapping (kept alive by the weights)
  std::shared_ptr<const void> file_;    ///< the mapping itself
  std::shared_ptr<const Bundle> draft_; ///< the embedded draft model (null: none)
  /// Decodes and validates the bundle in bytes [base, +size) of `file`, named `name` in errors;
  /// `nested`: an embedded draft (which may not embed one itself).
  static std::shared_ptr<const Bundle> decode(const std::shared_ptr<const MappedFile>& file,
                                              std::uint64_t base, std::uint64_t size,
                                              const std::string& name, bool nested);
};

/// How a bundle's weights are checked before it runs (docs/guarantees.md "Weights are
/// checksummed").
enum class WeightVerify {
  remembered, ///< verify, unless this unchanged file passed before (verified_record_path())
  always,     ///< verify whatever the record says (`--verify-weights`)
  never,      ///< do not verify (`--no-verify-weights`)
};

/// What check_weights() did.
struct WeightVerifyResult {
  bool verified = false;   ///< the blob was read and every chunk passed
  bool remembered = false; ///< skipped: the record says this unchanged file passed before
  WeightCheck check;       ///< figures of the pass (zero when skipped)
};

/// The record of bundle files whose weights passed: `$XDG_CACHE_HOME/tpullm/verified-bundles`
/// (an absolute XDG_CACHE_HOME), else `$HOME/.cache/tpullm/verified-bundles`; empty when
/// neither variable gives an absolute directory (then nothing is remembered).
std::filesystem::path verified_record_path();

/// Checks `b`'s weight blob against its CRC-32Cs as `how` says, on `threads` threads (0: the
/// cores this process may use). `remembered` skips the pass when the record holds the file's
/// key (its canonical path, device, inode, size, mtime and ctime as opened, and its checksum
/// list), and adds the key after a pass when the file is unchanged since it was opened and its
/// ctime is at least 2 s older than the pass (a write in the same timestamp tick could not be
/// told apart). The record is an optimisation: one it cannot read or write is ignored. Throws
/// what Bundle::verify_weights throws.
WeightVerifyResult check_weights(const Bundle& b, WeightVerify how, std::int64_t threads = 0);

/// The instruction-set family this build runs bundles for ("x86_64").
std::string host_isa();

} // namespace tpullm::bundle
