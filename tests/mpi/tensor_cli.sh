#!/usr/bin/env bash
# tpullm run / chat / bench --parallel tensor under mpirun (docs/distributed.md): a bundle compiled
# with --tensor-parallel 2 gives one process's greedy ids on 2 ranks over prompts of several
# segments, and chat one process's answer, as does a Q8_0 GGUF file (a Q4_K_M one, whose blocks
# the split would cut, is refused); bench reports the all-reduces and every rank's calls
# and memory; --memory-budget admits 2 ranks of a bundle whose share fits; one-line refusals for
# a split bundle run alone, on the wrong rank count, under --parallel pipeline, an ordinary
# bundle under --parallel tensor, and --layer-split with it; a rank killed mid-run ends every
# rank, mpirun non-zero, within 60 s.
# Usage: tensor_cli.sh TPULLM MPIEXEC MODELS_DIR WORK_DIR QWEN3_TOKENIZER_DIR
set -u
tpullm=$1 mpiexec=$2 models=$3 work=$4 tokenizer=$5
. "$(dirname "$0")/../cli/expect.sh"
. "$(dirname "$0")/mpi_cases.sh"
work_in "$work"
export XDG_CACHE_HOME=$work/cache
# Open MPI: root allowed (CI runs as root), more ranks than cores; other MPIs ignore these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fail=0

for tp in "" "--tensor-parallel 2"; do
  # shellcheck disable=SC2086
  "$tpullm" compile "$models/llama-gqa" -o "gqa${tp:+-tp}.bundle" --seq-length 128 \
    --max-input-length 16 --decode-chunks 64 $tp >/dev/null || { echo "FAIL: compile $tp"; exit 1; }
done
prompt=$(seq -s, 3 42) # 40 tokens: three prompt segments
# same_ids LABEL ONE.bundle TP.bundle N: N greedy ids of the split bundle on 2 ranks equal those
# of the ordinary bundle in one process.
same_ids() {
  local ref got
  ref=$("$tpullm" run "$2" --prompt-ids "$prompt" -n "$4" --ignore-eos --threads 1 -q)
  got=$("$mpiexec" -n 2 "$tpullm" run "$3" --prompt-ids "$prompt" -n "$4" --ignore-eos \
    --threads 1 -q --parallel tensor 2>&1)
  if [ -n "$ref" ] && [ "$got" = "$ref" ]; then
    echo "ok: $1 on 2 tensor-parallel ranks: the ids of one process"
  else
    fail=1
    echo "FAIL: $1 on 2 tensor-parallel ranks: '$got', one process: '$ref'"
  fi
}
same_ids "llama-gqa" gqa.bundle gqa-tp.bundle 24
# 3 segments and 23 decode steps: 26 calls, 2 all-reduces a layer (3 layers) each
expect 0 "tensor parallel: 2 ranks; 26 calls, 156 all-reduces" \
  "$mpiexec" -n 2 "$tpullm" run gqa-tp.bundle --prompt-ids "$prompt" -n 24 --ignore-eos \
  --threads 1 --parallel tensor

# A GGUF file (llama.cpp's Q8_0, activations rounded to int8 by default as for any GGUF): the
# split cuts whole blocks; one whose blocks it would cut (Q4_K_M: 256 values a block, 128
# columns of o a rank) is refused in one line.
gguf=$(dirname "$models")/models-gguf
"$tpullm" compile "$gguf/qwen2-q8_0/model.gguf" -o q8.bundle --seq-length 128 \
  --max-input-length 16 >/dev/null &&
  "$tpullm" compile "$gguf/qwen2-q8_0/model.gguf" -o q8-tp.bundle --seq-length 128 \
    --max-input-length 16 --tensor-parallel 2 >/dev/null || { echo "FAIL: compile Q8_0"; exit 1; }
same_ids "a Q8_0 GGUF" q8.bundle q8-tp.bundle 16
expect 2 "cuts GGUF blocks only at their edges; layers.0.o \(Q4_K, 256 values a block\)" \
  "$tpullm" compile "$gguf/llama-q4_k_m/model.gguf" -o k.bundle --tensor-parallel 2
rm -f q8.bundle q8-tp.bundle

# Refusals, each one line.
expect 2 "gqa-tp.bundle: is split for tensor parallel over 2 ranks: run it with mpirun -np 2" \
  "$tpullm" run gqa-tp.bundle --prompt-ids 1,2
expect 2 "--parallel: takes 'pipeline' or 'tensor', not 'both'" \
  "$tpullm" run gqa.bundle --prompt-ids 1,2 --parallel both
expect 2 "--layer-split: applies only with --parallel pipeline" \
  "$tpullm" run gqa-tp.bundle --prompt-ids 1,2 --parallel tensor --layer-split 1,2
expect_failure "was not compiled for tensor parallel: compile it with --tensor-parallel 2" \
  "$mpiexec" -n 2 "$tpullm" run gqa.bundle --prompt-ids 1,2 --parallel tensor
expect_failure "is split for 2 ranks \(compile --tensor-parallel 2\): run it with mpirun -np 2, not 3" \
  "$mpiexec" -n 3 "$tpullm" run gqa-tp.bundle --prompt-ids 1,2 --parallel tensor
expect_failure "is split for tensor parallel over 2 ranks: run it with mpirun -np 2 ... --parallel tensor" \
  "$mpiexec" -n 2 "$tpullm" run gqa-tp.bundle --prompt-ids 1,2 --parallel pipeline

# bench on 2 ranks: the all-reduces and both ranks' reports, every call run by both.
bj=$("$mpiexec" -n 2 "$tpullm" bench gqa-tp.bundle --parallel tensor --prompt 16 --context 16 \
  --repeat 1 --decode-steps 4 --threads 1 --json 2>/dev/null | tr -d '\n' | tr -s ' ')
reduces=$(printf '%s' "$bj" | grep -o '"all_reduces": [0-9]*' | cut -d' ' -f2 | sort -u)
calls=$(printf '%s' "$bj" | grep -o '"calls": [0-9]*' | cut -d' ' -f2 | sort -u)
if [ -n "$calls" ] && [ "$(printf '%s\n' "$calls" | wc -l)" -eq 1 ] && [ "$calls" -gt 0 ] &&
  [ "$reduces" = "$((calls * 6))" ] &&
  printf '%s' "$bj" | grep -q '"rank": 1, "layers": \[ 0, 3 \]' &&
  printf '%s' "$bj" | grep -q '"contention": { "skipped": "--parallel tensor" }'; then
  echo "ok: bench on 2 tensor-parallel ranks: $calls calls, $reduces all-reduces each"
else
  fail=1
  echo "FAIL: bench on 2 tensor-parallel ranks: calls '$calls', all-reduces '$reduces': $bj"
fi

# --memory-budget: 6 layers of the 0.5B shape (about 190 MB) split over 2 ranks run under 170 MiB
# each (one process is refused under it: mpi:pipeline-cli), with one process's ids.
"$tpullm" make-model --preset qwen2.5-0.5b --layers 6 --vocab 8192 --dtype bf16 --seed 3 \
  -o m6 >/dev/null || { echo "FAIL: the 6-layer model"; exit 1; }
for tp in "" "--tensor-parallel 2"; do
  # shellcheck disable=SC2086
  "$tpullm" compile m6 --mode bf16 --seq-length 256 --max-input-length 32 $tp \
    -o "m6${tp:+-tp}.bundle" >/dev/null || { echo "FAIL: compile m6 $tp"; exit 1; }
done
rm -rf m6
ref6=$("$tpullm" run m6.bundle --prompt-ids 5,6,7 -n 8 --ignore-eos --threads 1 -q)
got6=$("$mpiexec" -n 2 "$tpullm" run m6-tp.bundle --prompt-ids 5,6,7 -n 8 --ignore-eos \
  --threads 1 -q --parallel tensor --memory-budget 170 2>&1)
if [ -n "$ref6" ] && [ "$got6" = "$ref6" ]; then
  echo "ok: 2 tensor-parallel ranks within --memory-budget 170: the ids of one process"
else
  fail=1
  echo "FAIL: 2 tensor-parallel ranks under --memory-budget 170: '$got6', one process: '$ref6'"
fi
expect_failure "--parallel tensor: rank [01]: .*--memory-budget: rank [01] needs [0-9]+ MiB.*its shard of every layer" \
  "$mpiexec" -n 2 "$tpullm" run m6-tp.bundle --prompt-ids 5,6,7 -n 8 --threads 1 \
  --parallel tensor --memory-budget 40
rm -f m6.bundle m6-tp.bundle

# chat, and a rank killed mid-run: 6 layers of hidden 64 and a 150k vocabulary, slow enough to
# be caught running, with Qwen3's tokenizer and chat template.
"$tpullm" make-model --preset tiny --layers 6 --vocab 151936 --seed 1 -o tiny >/dev/null &&
  cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" tiny/ &&
  "$tpullm" compile tiny -o tiny.bundle --seq-length 2048 --max-input-length 16 >/dev/null &&
  "$tpullm" compile tiny -o tinytp.bundle --seq-length 2048 --max-input-length 16 \
    --tensor-parallel 2 >/dev/null || { echo "FAIL: tiny model"; exit 1; }
same_chat 'What is a tensor?' tiny.bundle "$mpiexec" -n 2 "$tpullm" chat tinytp.bundle \
  --parallel tensor
kill_a_rank 2 "tpullm run tinytp.bundle" "$mpiexec" -n 2 "$tpullm" run tinytp.bundle \
  --prompt-ids 1,2,3 -n 2000 --ignore-eos --threads 1 --parallel tensor -q
exit $fail
