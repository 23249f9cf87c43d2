#!/usr/bin/env bash
# Signal test (docs/guarantees.md "Outputs are all or nothing"): interrupts each writing command
# with SIGINT or SIGTERM at a few points and checks that no temporary file remains and that the
# previous output is intact (or, when the command finished first, that it succeeded).
# Usage: interrupt.sh TPULLM TPULLM_OPT MODELS_DIR WORK_DIR [TIR_FILE (a --split-input-file input)]
set -u
# Job control: background commands get the default SIGINT action (without it, a
# non-interactive shell starts them with SIGINT ignored, and the test would prove nothing).
set -m
tpullm=$1 opt=$2 models=$3 work=$4 tir=${5:-}
rm -rf "$work"
mkdir -p "$work/out" "$work/tmp"
export TMPDIR=$work/tmp
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# Temporary files any of the outputs below could leave: ".NAME.tmp-*" / ".NAME.old-*" beside a
# target, "tpullm-verify-*" in TMPDIR.
leftovers() { find "$work/out" "$work/tmp" -mindepth 1 \( -name '.*.tmp-*' -o -name '.*.old-*' -o -name 'tpullm-verify-*' \) -print; }

# Hashes of the files of OUTPUT (a file or directory), named relative to its parent.
hashes() { (cd "$(dirname "$1")" && find "$(basename "$1")" -type f -exec sha256sum {} + | sort) 2>/dev/null; }

# case NAME SIGNAL DELAY OUTPUT REF CMD...: OUTPUT (a file or directory) exists beforehand and
# must be unchanged unless the command exits 0 before the signal, or the signal came after the
# commit: then OUTPUT is the complete new output, equal to REF (the same command's output from an
# uninterrupted run, same basename; every writer here is deterministic). REF "-": none.
case_() {
  local name=$1 sig=$2 delay=$3 output=$4 ref=$5
  shift 5
  local before after
  before=$(hashes "$output")
  "$@" > "$work/stdout" 2> "$work/stderr" &
  local pid=$!
  sleep "$delay"
  kill -s "$sig" "$pid" 2>/dev/null
  wait "$pid"
  local rc=$?
  after=$(hashes "$output")
  local left
  left=$(leftovers)
  [ -z "$left" ] || bad "$name ($sig after ${delay}s, rc $rc): temporary files left: $left"
  if [ "$rc" -eq 0 ]; then
    echo "$name: finished before $sig after ${delay}s"
  else
    # Killed by the signal (128 + n) or refused: the previous output must be intact, or, when
    # the signal was delivered after the commit (a signal blocked during the rename is delivered
    # right after it), completely replaced.
    if [ "$before" != "$after" ]; then
      if [ "$ref" != - ] && [ "$after" = "$(hashes "$ref")" ]; then
        echo "$name: rc $rc after $sig at ${delay}s, after the commit: the complete new output"
        return
      fi
      bad "$name ($sig after ${delay}s, rc $rc): the previous output changed"
    fi
    if grep -q "internal error\|terminate called\|Aborted" "$work/stderr"; then
      bad "$name: $(cat "$work/stderr")"
    fi
    echo "$name: rc $rc after $sig at ${delay}s, output intact, no temporary files"
  fi
}

m=$models/qwen3-headdim
# Old outputs to protect.
"$tpullm" compile "$m" -o "$work/out/old.bundle" --seq-length 128 > /dev/null 2>&1 || bad "seed compile failed"
"$tpullm" make-model --preset tiny --dtype f32 -o "$work/out/made" > /dev/null 2>&1 || bad "seed make-model failed"
printf 'old contents\n' > "$work/out/opt.tir"
# What each interrupted command writes when it runs to the end.
mkdir -p "$work/ref"
"$tpullm" compile "$m" -o "$work/ref/old.bundle" --seq-length 256 > /dev/null 2>&1 || bad "reference compile failed"
"$tpullm" make-model --preset qwen2.5-0.5b --layers 1 --vocab 32768 --dtype bf16 --force -o "$work/ref/made" > /dev/null 2>&1 || bad "reference make-model failed"
if [ -n "$tir" ]; then
  "$opt" "$tir" --split-input-file -o "$work/ref/opt.tir" > /dev/null 2>&1 || bad "reference tpullm-opt failed"
fi
[ -z "$(leftovers)" ] || bad "a successful run left temporary files: $(leftovers)"

i=0
for delay in 0.02 0.05 0.1 0.2 0.4; do
  for sig in INT TERM; do
    i=$((i + 1))
    case_ "compile-$i" "$sig" "$delay" "$work/out/old.bundle" "$work/ref/old.bundle" \
      "$tpullm" compile "$m" -o "$work/out/old.bundle" --seq-length 256
    case_ "make-model-$i" "$sig" "$delay" "$work/out/made" "$work/ref/made" \
      "$tpullm" make-model --preset qwen2.5-0.5b --layers 1 --vocab 32768 --dtype bf16 --force -o "$work/out/made"
    case_ "verify-bundle-$i" "$sig" "$delay" "$work/out/old.bundle" - \
      "$tpullm" verify "$m" --level bundle
    if [ -n "$tir" ]; then
      case_ "opt-$i" "$sig" "$delay" "$work/out/opt.tir" "$work/ref/opt.tir" "$opt" "$tir" --split-input-file -o "$work/out/opt.tir"
      printf 'old contents\n' > "$work/out/opt.tir"
    fi
  done
done
exit $fail
