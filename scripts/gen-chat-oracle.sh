#!/usr/bin/env bash
# Regenerates the chat-template oracle files under tests/data/text/chat/:
#   cases.json            conversations x variants (the oracle's CHAT_CASES format)
#   expected_jinja2.jsonl  Python Jinja2 set up as transformers' apply_chat_template sets it up
#                          (../shared/tokoracle/chat_oracle_jinja2.py), one record per
#                          (template, conversation, variant): "text" or "error"
#   engine_cases.json     small templates exercising the engine's pieces (scoping, loop vars,
#                          slices, tojson, whitespace control, filters) with their contexts
#   engine_expected.jsonl  the same Jinja2 environment's renders of them
# Usage: scripts/gen-chat-oracle.sh [TOKENIZER_CACHE] [ORACLE_DIR]
# Needs python3 with jinja2 (Debian python3-jinja2) and the tokenizer files of
# scripts/fetch-tokenizers.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${1:-${TPULLM_TOKENIZER_CACHE:-$HOME/.cache/tpullm/tokenizers}}
oracle=${2:-$root/../shared/tokoracle}
[ -f "$oracle/chat_oracle_jinja2.py" ] || oracle=/work/shared/tokoracle
out=$root/tests/data/text/chat
mkdir -p "$out"
python3 "$root/scripts/chat_oracle_cases.py" "$out"
CHAT_CASES="$out/cases.json" TARGETS="qwen3 llama3 llama3_1 gemma3 deepseek_v3" \
  python3 "$oracle/chat_oracle_jinja2.py" "$out/expected_jinja2.jsonl" "$cache"
python3 "$root/scripts/chat_oracle_engine.py" "$out/engine_cases.json" "$out/engine_expected.jsonl"
echo "wrote $out" >&2
