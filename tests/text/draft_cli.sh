#!/usr/bin/env bash
# `run --draft prompt-lookup` and `run --draft DRAFT.bundle` print the answer plain decoding
# prints, greedy and sampled, as text and as ids (the library test, tests/runtime/test_speculation.cpp, checks the verify path token
# for token; this checks the command's wiring).
set -euo pipefail
tpullm=$1 bundle=$2 dir=$3
mkdir -p "$dir"
prompt="one two three four one two three four one two three four one two"
same() { # same DRAFT OPTIONS...: the answer with and without --draft DRAFT
  local draft=$1
  shift
  "$tpullm" run "$bundle" "$@" > "$dir/plain.txt" 2> "$dir/plain.err"
  "$tpullm" run "$bundle" "$@" --draft "$draft" --draft-max 4 > "$dir/spec.txt" 2> "$dir/spec.err"
  if ! cmp -s "$dir/plain.txt" "$dir/spec.txt"; then
    echo "FAIL: the answer differs with --draft ($*)"
    diff "$dir/plain.txt" "$dir/spec.txt" || true
    exit 1
  fi
  grep -q "^stopped: " "$dir/spec.err" || { echo "FAIL: no stop line"; cat "$dir/spec.err"; exit 1; }
}
same prompt-lookup --prompt-ids 5,6,7,8,5,6,7,8,5,6,7,8,5,6 -n 24
same prompt-lookup --prompt "$prompt" -n 24 --temperature 0.9 --seed 7
same "$bundle" --prompt "$prompt" -n 16 --temperature 0.9 --seed 7
same "$bundle" --prompt "$prompt" -n 24
# The bundle as its own draft model: greedy drafts are kept.
grep -Eq "^speculation: [1-9][0-9]* verify calls, [0-9]+ tokens drafted, [1-9][0-9]* accepted" \
  "$dir/spec.err" || { echo "FAIL: no drafts kept"; cat "$dir/spec.err"; exit 1; }
echo "ok: run --draft gives the plain answers"
