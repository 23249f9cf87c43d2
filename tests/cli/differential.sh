#!/usr/bin/env bash
# Differential test over compile options (docs/guarantees.md "Whatever compile accepts, the
# runtime runs"): for each option set, a bundle `compile` accepts must `run`, and
# `verify --level bundle` must end exactly as `verify --level tpu` does (both pass, or both
# refuse); a set `compile` refuses must be refused by `verify --level bundle` too.
# Usage: differential.sh TPULLM MODEL_DIR WORK_DIR
set -u
tpullm=$1 model=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
fail=0
printf '{"name":"small","cores":2,"local_memory":4096,"alignment":64,"weight_dtypes":["f32","bf16","f16","i8","i4","u4"]}\n' > "$work/small.json"
printf '{"name":"one-core","cores":1,"local_memory":65536,"alignment":64,"weight_dtypes":["f32","bf16","f16","i8","i4","u4"]}\n' > "$work/one-core.json"
printf '{"name":"f32-only","cores":2,"local_memory":1048576,"alignment":64,"weight_dtypes":["f32"]}\n' > "$work/f32-only.json"
sets=(
  ""
  "--tile-rows 16"
  "--tile-rows 8"
  "--tile-rows 1"
  "--no-layer-groups"
  "--mode bf16 --fusions fuse-add-rmsnorm,fuse-qkv"
  "--mode f16"
  "--target $work/small.json"
  "--target $work/one-core.json --tile-rows 32"
  "--target $work/f32-only.json --mode bf16"
)
i=0
for opts in "${sets[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  "$tpullm" compile "$model" -o "$work/$i.bundle" --seq-length 128 $opts > "$work/$i.compile" 2>&1
  c=$?
  # shellcheck disable=SC2086
  "$tpullm" verify "$model" --level bundle $opts > "$work/$i.vb" 2>&1
  vb=$?
  # shellcheck disable=SC2086
  "$tpullm" verify "$model" --level tpu $opts > "$work/$i.vt" 2>&1
  vt=$?
  r=-
  if [ "$c" -eq 0 ]; then
    "$tpullm" run "$work/$i.bundle" --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 -n 4 -q > "$work/$i.run" 2>&1
    r=$?
    [ "$r" -eq 0 ] || { fail=1; echo "FAIL [$opts]: compile accepted, run exits $r: $(tail -1 "$work/$i.run")"; }
  else
    [ "$vb" -ne 0 ] || { fail=1; echo "FAIL [$opts]: compile refused, verify --level bundle passed"; }
  fi
  [ "$vb" -eq "$vt" ] || { fail=1; echo "FAIL [$opts]: verify --level bundle exits $vb, --level tpu $vt: $(tail -1 "$work/$i.vb") / $(tail -1 "$work/$i.vt")"; }
  for f in "$work/$i.compile" "$work/$i.vb" "$work/$i.vt"; do
    if grep -q "tpullm [a-z]*: internal error\|terminate called\|Aborted" "$f"; then
      fail=1; echo "FAIL [$opts]: $(cat "$f")"
    fi
  done
  echo "[$opts] compile $c, run $r, verify bundle $vb, tpu $vt"
done
exit $fail
