#!/usr/bin/env bash
# Quick start, step 1: install dependencies (Debian 12 packages), build Release into build/,
# and run the main job on the bundled default.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" "$root/build"
echo
echo "== main job: tpullm-opt on the bundled Transformer block (examples/block.tir) =="
"$root/build/tools/tpullm-opt" "$root/examples/block.tir" --pass-pipeline=canonicalize,cse,dce --timing
echo
echo "== main job: import a bundled checkpoint and check its Top modules against transformers =="
"$root/build/tools/tpullm" verify "$root/tests/data/models/qwen2-tied-bias" --level top
