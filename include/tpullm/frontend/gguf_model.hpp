#pragma once
/// A GGUF file (llama.cpp's format) as a ModelDesc: the architecture, dimensions, RoPE, norms,
/// vocabulary and every weight come from the file; nothing else is read.
///
/// Architectures (general.architecture):
///   llama    -> family llama (Llama 2 / 3.x, Mistral; Mixtral when {arch}.expert_count > 0);
///               the q / k rows llama.cpp's converter permuted (LlamaModel.permute: rows of each
///               head reordered from the two contiguous halves of HF's rotate_half to interleaved
///               pairs) are put back, exactly (a row reorder of whole rows: blocks untouched);
///   qwen2    -> qwen2 (q / k / v biases);
///   qwen3    -> qwen3 (q / k RMSNorm);
///   qwen3moe -> qwen3_moe (stacked ffn_*_exps experts, ffn_gate_inp router).
/// Anything else is refused by name (Error(unsupported)).
///
/// Weights: F32 / F16 / BF16 tensors become plain weights viewing the mapped file; block types
/// become GgmlWeight slots viewing their blocks (repacked exactly at compile time,
/// conversion/ggml_blocks.hpp); a type tpullm does not import is refused naming the tensor and
/// the type. Tensor names are llama.cpp's (token_embd, output_norm, output, blk.N.attn_norm,
/// attn_q / attn_k / attn_v / attn_output (+ .bias), attn_q_norm / attn_k_norm, ffn_norm,
/// ffn_gate / ffn_up / ffn_down, ffn_gate_inp, ffn_gate_exps / ffn_up_exps / ffn_down_exps,
/// rope_freqs); an output.weight absent means tied embeddings.
///
/// The text side (tokenizer.ggml.*, tokenizer.chat_template) becomes ModelDesc::text through
/// frontend::text_files_from_gguf (frontend/gguf_text.hpp).

#include "tpullm/frontend/gguf.hpp"
#include "tpullm/frontend/model_desc.hpp"

#include <filesystem>

namespace tpullm::frontend {

/// Loads and validates the GGUF file `path` (dims, every expected tensor's presence, type and
/// shape; no unused tensor unless opts.allow_unused_tensors). ModelDesc::dir is the file's
/// folder, ModelDesc::source_file the file.
ModelDesc load_gguf_model(const std::filesystem::path& path, const LoadOptions& opts = {});

/// The HfConfig equivalent of a GGUF's metadata (`tensors` gives the vocabulary size, biases,
/// q/k norms and tied embeddings); Error(unsupported) for an architecture or setting tpullm does
/// not run, Error(invalid_input) for missing or malformed keys.
HfConfig gguf_config(const GgufFile& f);

} // namespace tpullm::frontend
