#!/usr/bin/env bash
# Silent corruption (docs/guarantees.md "Weights are checksummed"): one flipped bit in the weight
# blob of a compiled bundle is found by `inspect --verify`, and by run, chat, bench and serve by
# default (exit 2, naming the byte range), while the intact bundle passes; --no-verify-weights
# skips the check; a file that passed is remembered (XDG_CACHE_HOME here) until it changes.
# Usage: corrupt_weights.sh TPULLM MODEL_DIR WORK_DIR
set -u
tpullm=$1 model=$2 work=$3
. "$(dirname "$0")/expect.sh"
work_in "$work"
export XDG_CACHE_HOME=$work/cache # the record of verified bundles, away from the real one
b=$work/good.bundle
"$tpullm" compile "$model" -o "$b" --seq-length 128 > /dev/null 2>&1 || { echo "compile failed"; exit 1; }
expect 0 "chunks verified" "$tpullm" inspect "$b" --verify
expect 0 "stopped" "$tpullm" run "$b" --prompt-ids 1,2,3 -n 2 --verify-weights
expect 2 "contradicts --no-verify-weights" "$tpullm" run "$b" --prompt-ids 1 --verify-weights --no-verify-weights
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
  # By default, on every command that runs a bundle, before any answer.
  expect 2 "^tpullm run: invalid input: .*bad.bundle: corrupted weights: blob bytes" "$tpullm" run "$work/bad.bundle" --prompt-ids 1,2,3 -n 2
  expect 2 "corrupted weights" "$tpullm" run "$work/bad.bundle" --prompt-ids 1,2,3 -n 2 --no-mmap
  expect 2 "corrupted weights" "$tpullm" chat "$work/bad.bundle" < /dev/null
  expect 2 "corrupted weights" "$tpullm" bench "$work/bad.bundle" --prompt 8 --context 8 --decode-steps 1 --repeat 1 --no-contention
  expect 2 "corrupted weights" timeout 60 "$tpullm" serve "$work/bad.bundle" --port 0
  expect 0 "weights: not verified \(--no-verify-weights\)" "$tpullm" run "$work/bad.bundle" --prompt-ids 1,2,3 -n 2 --no-verify-weights
done
# Remembered: a file last changed at least 2 s before its check passed is not read again while
# its identity (device, inode, size, mtime, ctime) stays; any write changes ctime. (On a slow
# machine the checks above may already have come 2 s after the compile and been remembered:
# start from an empty record.)
rm -f "$XDG_CACHE_HOME/tpullm/verified-bundles"
sleep 2
expect 0 "weights: [0-9]+ CRC-32C chunks verified" "$tpullm" run "$b" --prompt-ids 1,2,3 -n 2
expect 0 "weights: verified on an earlier run of this unchanged file" "$tpullm" run "$b" --prompt-ids 1,2,3 -n 2
expect 0 "weights: [0-9]+ CRC-32C chunks verified" "$tpullm" run "$b" --prompt-ids 1,2,3 -n 2 --verify-weights
[ -s "$XDG_CACHE_HOME/tpullm/verified-bundles" ] || { fail=1; echo "FAIL: no record written"; }
# The same file damaged in place, its mtime put back: ctime still moves, so it is checked again.
mtime=$(stat -c %Y "$b")
at=$((size - 100))
byte=$(od -An -tu1 -j "$at" -N1 "$b" | tr -d ' ')
printf "$(printf '\\%03o' $((byte ^ 16)))" | dd of="$b" bs=1 seek="$at" conv=notrunc status=none
touch -m -d "@$mtime" "$b"
expect 2 "corrupted weights" "$tpullm" run "$b" --prompt-ids 1,2,3 -n 2
# A damaged record (garbage, a FIFO) is ignored, never trusted or waited on.
printf 'not a key\n%.0s' 1 2 3 > "$XDG_CACHE_HOME/tpullm/verified-bundles"
expect 2 "corrupted weights" "$tpullm" run "$b" --prompt-ids 1,2,3 -n 2
rm -f "$XDG_CACHE_HOME/tpullm/verified-bundles"
mkfifo "$XDG_CACHE_HOME/tpullm/verified-bundles"
expect 2 "corrupted weights" timeout 30 "$tpullm" run "$b" --prompt-ids 1,2,3 -n 2
# --json with a file name that is not UTF-8 stays valid output.
cp "$b" "$work/$(printf 'name-\377')".bundle
expect 0 "\"file\"" "$tpullm" inspect "$work/$(printf 'name-\377')".bundle --json
exit $fail
