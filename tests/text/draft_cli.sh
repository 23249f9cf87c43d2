#!/usr/bin/env bash
# `run --draft prompt-lookup`, `--draft self` and `--draft DRAFT.bundle` print the answer plain decoding
# prints, greedy and sampled, as text and as ids (the library test, tests/runtime/test_speculation.cpp, checks the verify path token
# for token; this checks the command's wiring).
set -euo pipefail
tpullm=$1 bundle=$2 dir=$3 short=$4 # short: a bundle with a draft model compiled in
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
# --draft self: the draft compiled into the bundle (compile --draft-mode w8a16 --draft-layers 1),
# its integer linears taking int8 inputs (--draft-act-quant's default).
"$tpullm" inspect "$short" |
  grep -Eq "^draft   1 of 2 layers in w8a16, .* [1-9][0-9]* of [0-9]+ linears with int8 inputs" ||
  { echo "FAIL: inspect shows no draft model with int8 inputs"; "$tpullm" inspect "$short"; exit 1; }
# compile --verify-lengths 5 added a 5-row prefill / prefill_kv variant: the verify calls of
# --draft-max 4 run through it.
"$tpullm" inspect "$short" | grep -Eq "prefill variants \[16,5\]" ||
  { echo "FAIL: --verify-lengths 5 built no 5-row variant"; "$tpullm" inspect "$short"; exit 1; }
full=$bundle
bundle=$short same self --prompt "$prompt" -n 16 --temperature 0.9 --seed 7
grep -Eq "^speculation: [1-9][0-9]* verify calls" "$dir/spec.err" ||
  { echo "FAIL: --draft self made no verify call"; cat "$dir/spec.err"; exit 1; }
# The draft model caught up on the prompt with the prefill, not at its first draft.
grep -Eq "^speculation: .*the draft model's prompt catch-up [0-9.]+ ms" "$dir/spec.err" ||
  { echo "FAIL: the draft model was not prepared with the prompt"; cat "$dir/spec.err"; exit 1; }
bundle=$full
same "$bundle" --prompt "$prompt" -n 24
# The bundle as its own draft model: a draft step as costly as the model's can never pay for
# itself, so the draft length (runtime/speculation.hpp DraftLength) never asks for one.
grep -Eq "^speculation: 0 verify calls" "$dir/spec.err" ||
  { echo "FAIL: a draft as costly as the model was called"; cat "$dir/spec.err"; exit 1; }
echo "ok: run --draft gives the plain answers"
