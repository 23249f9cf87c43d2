#!/usr/bin/env bash
# Dev check for refactors: compiles 20 reference bundles (every checkpoint kind in tests/data, every mode, MoE,
# GGUF, calibrated int8, fusions, forced tiles) with the given tpullm binary on a fixed 2-core target and prints
# one "sha256  name" line each. Run it with the binary of two commits and diff the outputs: a refactor that should
# not change bundles must print the same 20 lines. Not part of CI (about a minute on 2 cores).
#   scripts/bundle-hashes.sh path/to/tpullm [workdir]
set -euo pipefail
tp=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
m=$root/tests/data/models
g=$root/tests/data/models-gguf
printf '{"cores": 2, "local_memory": 1048576, "alignment": 64}\n' >"$work/target.json"
t=(--target "$work/target.json" --threads 1 --seq-length 256)
"$tp" calibrate "$m/llama-gqa" -o "$work/llama-gqa.calib.json" >"$work/calib.log" 2>&1 ||
  { echo "calibrate failed (see $work/calib.log)" >&2; exit 1; }
c() { # name, then compile arguments
  local name=$1
  shift
  "$tp" compile "$@" "${t[@]}" -o "$work/$name.bundle" >"$work/$name.log" 2>&1 ||
    { echo "compile failed: $name (see $work/$name.log)" >&2; exit 1; }
  (cd "$work" && sha256sum "$name.bundle")
}
c llama-f32 "$m/llama-gqa"
c llama-bf16 "$m/llama-gqa" --mode bf16
c llama-f16-kvbf16 "$m/llama-gqa" --mode f16 --kv-dtype bf16
c llama-w8a16 "$m/llama-gqa" --mode w8a16 --group-size 32
c llama-w4a16-g32-sym "$m/llama-gqa" --mode w4a16 --group-size 32 --symmetric
c llama-int8-dyn "$m/llama-gqa" --mode int8
c llama-int8-static "$m/llama-gqa" --mode int8 --act-quant static --calib "$work/llama-gqa.calib.json"
c llama-int8-smooth "$m/llama-gqa" --mode int8 --act-quant static --act-asymmetric --calib "$work/llama-gqa.calib.json" --smooth-alpha 0.5
c llama-fused "$m/llama-gqa" --mode bf16 --fusions fuse-add-rmsnorm,fuse-qkv,fuse-lm-head-argmax
c llama-tiles "$m/llama-gqa" --tile-rows 8
c llama-nogroups "$m/llama-gqa" --no-layer-groups --lm-head-dtype w8 --embedding-dtype w4 --group-size 32
c llama-gptq "$m/llama-gqa-gptq-g32"
c qwen2-tied "$m/qwen2-tied-bias" --mode f16
c qwen2-awq "$m/qwen2-tied-bias-awq-g32" --mode bf16
c qwen3-headdim "$m/qwen3-headdim" --mode w8a16 --group-size 0 --keep-float 'model\.layers\.0\..*'
c mixtral "$m/mixtral-e8k2" --mode bf16
c qwen3moe "$m/qwen3moe-e16k4" --mode w4a16 --group-size 32
c gguf-q4_0 "$g/llama-q4_0/model.gguf"
c gguf-q4_k_m "$g/llama-q4_k_m/model.gguf"
c gguf-q6_k "$g/qwen2-q6_k/model.gguf"
