#!/usr/bin/env bash
# Hostile arguments that need a shell to pass (empty strings, bytes that are not UTF-8):
# each is refused with a one-line reason and exit status 2, or handled, never an internal error.
# Usage: shell_cases.sh TPULLM MODEL_DIR WORK_DIR
set -u
tpullm=$1 model=$2 work=$3
. "$(dirname "$0")/expect.sh"
work_in "$work"
expect 2 "^tpullm compile: invalid input: --output: the output path is empty$" "$tpullm" compile "$model" -o ""
expect 2 "--mode: '' is not f32, bf16, f16, w8a16, w4a16 or int8" "$tpullm" compile "$model" -o x.bundle --mode ''
expect 2 "--embedding-dtype: 'i8' is not f32, bf16, f16, w8 or w4" "$tpullm" compile "$model" -o x.bundle --embedding-dtype i8
expect 2 "names a directory, not a file" "$tpullm" compile "$model" -o "$work/sub/"
[ -e "$work/-" ] && { fail=1; echo "FAIL: a file named '-' was created"; }
# An empty --qat-grid is refused, not taken as no grid (it was: the checkpoint came out off-grid).
expect 2 "--qat-grid: '' is not int4 or int8" "$tpullm" make-model --preset tiny --qat-grid '' -o "$work/qat-empty"
[ -e "$work/qat-empty" ] && { fail=1; echo "FAIL: make-model --qat-grid '' wrote a checkpoint"; }
# A bundle whose path is not UTF-8: --json output stays valid (U+FFFD), text output as given.
"$tpullm" compile "$model" -o "$work/ok.bundle" --seq-length 128 > /dev/null 2>&1 || { echo "compile failed"; exit 1; }
bad=$work/$(printf 'name-\377\376').bundle
cp "$work/ok.bundle" "$bad"
expect 0 '"file": ".*name-' "$tpullm" inspect "$bad" --json
"$tpullm" inspect "$bad" --json | python3 -c 'import json, sys; json.load(sys.stdin)' ||
  { fail=1; echo "FAIL: inspect --json of a non-UTF-8 path is not valid JSON"; }
# An over-long component in the middle of the path: a one-line reason, not an internal error.
long=$(printf 'd%.0s' $(seq 1 300))
expect 2 "File name too long|longer than" "$tpullm" compile "$model" -o "$work/$long/x.bundle"
exit $fail
