#!/usr/bin/env bash
# `run --draft prompt-lookup` prints the answer plain decoding prints, greedy and sampled, as text
# and as ids (the library test, tests/runtime/test_speculation.cpp, checks the verify path token
# for token; this checks the command's wiring).
set -euo pipefail
tpullm=$1 bundle=$2 dir=$3
mkdir -p "$dir"
prompt="one two three four one two three four one two three four one two"
same() { # same OPTIONS...: the answer with and without --draft
  "$tpullm" run "$bundle" "$@" > "$dir/plain.txt" 2> "$dir/plain.err"
  "$tpullm" run "$bundle" "$@" --draft prompt-lookup:4 > "$dir/spec.txt" 2> "$dir/spec.err"
  if ! cmp -s "$dir/plain.txt" "$dir/spec.txt"; then
    echo "FAIL: the answer differs with --draft ($*)"
    diff "$dir/plain.txt" "$dir/spec.txt" || true
    exit 1
  fi
  grep -q "^stopped: " "$dir/spec.err" || { echo "FAIL: no stop line"; cat "$dir/spec.err"; exit 1; }
}
same --prompt "$prompt" -n 24
same --prompt "$prompt" -n 24 --temperature 0.9 --seed 7
same --prompt-ids 5,6,7,8,5,6,7,8,5,6,7,8,5,6 -n 24
echo "ok: run --draft gives the plain answers"
