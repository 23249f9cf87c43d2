#pragma once
/// The text side of a GGUF: its `tokenizer.ggml.*` metadata and `tokenizer.chat_template` turned
/// into the HuggingFace files tpullm's tokenizer and chat code read (tokenizer.json,
/// tokenizer_config.json, generation_config.json), so a GGUF-built bundle tokenizes and chats
/// with the same code as a folder-built one (docs/text.md, "Tokenizers from a GGUF").
///
/// Read: tokenizer.ggml.model ("gpt2": byte-level BPE with merges; "llama": SentencePiece-style
/// BPE with scores and byte fallback), .pre (the byte-level pre-tokenizer's name, as llama.cpp
/// names them), .tokens, .token_type, .scores, .merges, .bos/.eos/.eot/.eom/.unknown/.padding
/// _token_id, .add_bos_token, .add_eos_token, .add_space_prefix and tokenizer.chat_template.
/// Refused by name (Error(unsupported)): other models ("bert", "t5", "rwkv", ...) and
/// pre-tokenizer names tpullm does not know. Malformed metadata is Error(invalid_input) naming
/// the key: missing tokens, arrays of another type or length than the token list, a merge that
/// names no token, duplicate tokens, special-token ids outside the vocabulary.

#include <map>
#include <string>

#include "tpullm/frontend/gguf.hpp"
#include "tpullm/frontend/text_files.hpp"

namespace tpullm::frontend {

/// Synthesizes the HF text files from a GGUF's metadata (`where` names the file in errors).
/// Returns an empty TextFiles (no tokenizer) when the file has no tokenizer.ggml.model or names
/// "none" / "no_vocab". Throws Error(unsupported / invalid_input) as the file comment says.
TextFiles text_files_from_gguf(const std::map<std::string, GgufValue, std::less<>>& metadata,
                               const std::string& where);

} // namespace tpullm::frontend
