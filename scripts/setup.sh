#!/usr/bin/env bash
# Quick start, step 1: install dependencies (Debian 12 packages), build Release into build/,
# and run the main job on the bundled default.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
model="$root/tests/data/models/qwen2-tied-bias"
bundle="$root/build/qwen2-tied-bias.bundle"
echo
echo "== main job: compile the bundled qwen2 checkpoint into one bundle =="
"$root/build/tools/tpullm" compile "$model" -o "$bundle" --seq-length 512 --max-input-length 64 \
  --decode-chunks 256,128
echo
echo "== main job: generate 24 tokens from the bundle (greedy) =="
"$root/build/tools/tpullm" run "$bundle" --prompt-ids 17,300,42,7,256,99 -n 24
echo
echo "== main job: the same path checked against transformers' logits =="
"$root/build/tools/tpullm" verify "$model" --level bundle
