#!/usr/bin/env bash
# (Re)creates the tokenizer tests' expected outputs, tests/data/text/tok/NAME.jsonl, from the
# oracle: HuggingFace's Rust `tokenizers` (npm tokenizers@0.23.2, its native binary) run by
# ../shared/tokoracle/oracle_rs.cjs over the real tokenizer files (scripts/fetch-tokenizers.sh).
# Cases per tokenizer: tests/data/text/tok/hard_cases.json (hand-written) plus GENERATED strings
# from fuzz_gen.py with a seed of its own, so the tokenizers together see a few thousand.
# Usage: scripts/gen-tokenizer-oracle.sh [ORACLE_DIR]   (default /tmp/tokoracle; npm installs there)
# Env: TOKORACLE (runner scripts, default ../shared/tokoracle beside the repo, else /work/shared/tokoracle),
#      TPULLM_TOKENIZER_CACHE (default ~/.cache/tpullm/tokenizers), GENERATED (default 300).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
oracle_dir=${1:-/tmp/tokoracle}
runner=${TOKORACLE:-$root/../shared/tokoracle}
[ -d "$runner" ] || runner=/work/shared/tokoracle
cache=${TPULLM_TOKENIZER_CACHE:-$HOME/.cache/tpullm/tokenizers}
generated=${GENERATED:-300}
out=$root/tests/data/text/tok
mkdir -p "$oracle_dir"
if [ ! -d "$oracle_dir/node_modules/tokenizers" ]; then
  (cd "$oracle_dir" && npm install --no-save tokenizers@0.23.2 >/dev/null)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# compact CASES RAW OUT: keeps what the tests compare (text, flags, ids, tokens, both decodes,
# stream deltas).
compact() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))
with open(sys.argv[2]) as f, open(sys.argv[3], "w") as o:
    for line in f:
        r = json.loads(line)
        rec = {"text": cases[r["i"]], "add_special": r["add_special"], "ids": r["ids"], "tokens": r["tokens"],
               "decoded": r["decoded"], "decoded_skip": r["decoded_skip"]}
        if "stream_deltas" in r:
            rec["stream_deltas"] = r["stream_deltas"]
        o.write(json.dumps(rec, ensure_ascii=False) + "\n")
PY
}
seed=1
for name in qwen3 llama3 llama3_1 llama2 gemma3 deepseek_v3 gptoss; do
  [ -f "$cache/$name/tokenizer.json" ] || { echo "missing $cache/$name: run scripts/fetch-tokenizers.sh" >&2; exit 2; }
  python3 "$runner/fuzz_gen.py" "$generated" "$((1000 + seed))" > "$work/fuzz.json"
  python3 - "$out/hard_cases.json" "$work/fuzz.json" "$work/cases.json" <<'PY'
import json, sys
hard, fuzz = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
json.dump(hard + fuzz, open(sys.argv[3], "w"), ensure_ascii=False)
PY
  (cd "$oracle_dir" && RAYON_NUM_THREADS=1 CASES="$work/cases.json" node "$runner/oracle_rs.cjs" "$work/$name.raw.jsonl" "$cache/$name")
  compact "$work/cases.json" "$work/$name.raw.jsonl" "$out/$name.jsonl"
  seed=$((seed + 1))
done
# The hand-made small tokenizers (tests/data/text/tok/mini/NAME/tokenizer.json) cover what the
# real files do not use: other Split behaviours and invert, lstrip / rstrip / single_word, a
# normalized added token, unk, a subword prefix and word suffix, Strip with stop, a
# TemplateProcessing suffix, ByteLevel with add_prefix_space and its own regex.
python3 - "$out/hard_cases.json" "$out/mini/extra_cases.json" "$work/cases.json" <<'PY'
import json, sys
json.dump(json.load(open(sys.argv[1])) + json.load(open(sys.argv[2])), open(sys.argv[3], "w"), ensure_ascii=False)
PY
for mini in "$out"/mini/*/; do
  name=mini_$(basename "$mini")
  (cd "$oracle_dir" && RAYON_NUM_THREADS=1 CASES="$work/cases.json" node "$runner/oracle_rs.cjs" "$work/$name.raw.jsonl" "$mini")
  compact "$work/cases.json" "$work/$name.raw.jsonl" "$out/$name.jsonl"
done
du -ch "$out"/*.jsonl | tail -1
