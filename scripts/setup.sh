#!/usr/bin/env bash
# Quick start, step 1: install dependencies (Debian 12 packages), build Release into build/,
# and run the main job: a tiny random model with a real tokenizer and chat template answers a chat
# message in streamed text (compiled on first use into the bundle cache), then the compile path is
# checked against transformers' logits on a bundled checkpoint.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
tpullm="$root/build/tools/tpullm"
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
tokenizer=${TPULLM_TOKENIZER_CACHE:-$home/.cache/tpullm/tokenizers}/qwen3 # fetch-tokenizers.sh
model="$root/build/tiny-qwen3"
echo
echo "== main job: a tiny random model with Qwen3's real tokenizer and chat template =="
rm -rf "$model"
"$tpullm" make-model --preset tiny --vocab 151936 --dtype bf16 -o "$model"
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" "$model/"
echo
echo "== main job: chat with it (compiled on first use, then cached) =="
echo "(the weights are random, so the answer is gibberish: real tokens, real template, no meaning)"
"$tpullm" run "$model" --mode bf16 --chat "What does a compiler do?" -n 24 --temperature 0.8 \
  --top-k 40 --seed 1
echo
echo "== main job: the same model through tpullm chat (the cached bundle: no compile) =="
echo "And in one sentence?" | "$tpullm" chat "$model" --mode bf16 -n 12 --temperature 0.8 --top-k 40 \
  --seed 2
echo
echo "== main job: the compile path checked against transformers' logits =="
"$tpullm" verify "$root/tests/data/models/qwen2-tied-bias" --level bundle
