#!/usr/bin/env bash
# Silent corruption (docs/guarantees.md "Weights are checksummed"): one flipped bit in the weight
# blob of a compiled bundle is found by `inspect --verify` and `run --verify-weights` (exit 2,
# naming the byte range), while the intact bundle passes both.
# Usage: corrupt_weights.sh TPULLM MODEL_DIR WORK_DIR
set -u
tpullm=$1 model=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail=0
expect() { # expect RC REGEX CMD...
  local want=$1 re=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ] || ! printf '%s' "$out" | grep -Eq -- "$re"; then
    fail=1
    echo "FAIL: $* -> rc $rc (want $want), output: $out"
  else
    echo "ok: $* -> $rc"
  fi
}
b=$work/good.bundle
"$tpullm" compile "$model" -o "$b" --seq-length 128 > /dev/null 2>&1 || { echo "compile failed"; exit 1; }
expect 0 "chunks verified" "$tpullm" inspect "$b" --verify
expect 0 "stopped" "$tpullm" run "$b" --prompt-ids 1,2,3 -n 2 --verify-weights
size=$(stat -c %s "$b")
# Flip one bit near the end of the file (inside the weight blob, which ends the file) and one
# in the middle of the blob.
for at in $((size - 100)) $((size - size / 4)); do
  cp "$b" "$work/bad.bundle"
  byte=$(od -An -tu1 -j "$at" -N1 "$work/bad.bundle" | tr -d ' ')
  printf "$(printf '\\%03o' $((byte ^ 16)))" | dd of="$work/bad.bundle" bs=1 seek="$at" conv=notrunc status=none
  cmp -s "$b" "$work/bad.bundle" && { fail=1; echo "FAIL: the flip did not change the file"; }
  expect 2 "corrupted weights: blob bytes \[[0-9]+, [0-9]+\) fail their CRC-32C" "$tpullm" inspect "$work/bad.bundle" --verify
  expect 2 "corrupted weights" "$tpullm" run "$work/bad.bundle" --prompt-ids 1,2,3 -n 2 --verify-weights
done
# --json with a file name that is not UTF-8 stays valid output.
cp "$b" "$work/$(printf 'name-\377')".bundle
expect 0 "\"file\"" "$tpullm" inspect "$work/$(printf 'name-\377')".bundle --json
exit $fail
