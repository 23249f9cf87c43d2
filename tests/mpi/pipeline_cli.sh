#!/usr/bin/env bash
# tpullm run --parallel pipeline under mpirun (docs/distributed.md): the same greedy ids as one
# process on 2 and 3 ranks, with the default split and --layer-split, prompts of several segments;
# one-line refusals for a run that is not under mpirun, a split that does not fit, a checkpoint
# folder instead of a bundle; --memory-budget refusing one process and admitting two ranks; and a
# rank killed mid-run ends every rank, mpirun non-zero, within 60 s.
# tpullm chat --parallel pipeline answers as one process does; tpullm bench --parallel pipeline
# reports rank 0's traffic and every rank's calls and memory.
# Usage: pipeline_cli.sh TPULLM MPIEXEC MODELS_DIR WORK_DIR QWEN3_TOKENIZER_DIR
set -u
tpullm=$1 mpiexec=$2 models=$3 work=$4 tokenizer=$5
. "$(dirname "$0")/../cli/expect.sh"
. "$(dirname "$0")/mpi_cases.sh"
work_in "$work"
export XDG_CACHE_HOME=$work/cache
# Open MPI: root allowed (CI runs as root), more ranks than cores; other MPIs ignore these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

"$tpullm" compile "$models/llama-gqa" -o gqa.bundle --seq-length 128 --max-input-length 16 \
  --decode-chunks 64 >/dev/null || { echo "FAIL: compile"; exit 1; }
prompt=$(seq -s, 3 42) # 40 tokens: three prompt segments
ref=$("$tpullm" run gqa.bundle --prompt-ids "$prompt" -n 24 --ignore-eos --threads 1 -q)
[ -n "$ref" ] || { echo "FAIL: no reference ids"; exit 1; }
for np in 2 3; do
  for split in "" "--layer-split $([ $np = 2 ] && echo 2,1 || echo 1,1,1)"; do
    # shellcheck disable=SC2086
    got=$("$mpiexec" -n $np "$tpullm" run gqa.bundle --prompt-ids "$prompt" -n 24 --ignore-eos \
      --threads 1 -q --parallel pipeline $split 2>&1)
    if [ "$got" = "$ref" ]; then
      echo "ok: $np ranks $split: the ids of one process"
    else
      fail=1
      echo "FAIL: $np ranks $split: '$got', one process: '$ref'"
    fi
  done
done
expect 0 "pipeline: 3 ranks, layers \[0, 1\) \[1, 2\) \[2, 3\); 26 round trips" \
  "$mpiexec" -n 3 "$tpullm" run gqa.bundle --prompt-ids "$prompt" -n 24 --ignore-eos --threads 1 \
  --parallel pipeline

# Refusals, each one line (a single process, as started without mpirun).
expect 2 "runs on 2 ranks or more: start it with mpirun -np N" \
  "$tpullm" run gqa.bundle --prompt-ids 1,2 --parallel pipeline
expect 2 "--layer-split: applies only with --parallel pipeline" \
  "$tpullm" run gqa.bundle --prompt-ids 1,2 --layer-split 1,2
expect 2 "--parallel: runs a compiled bundle file; compile '.*llama-gqa' first" \
  "$tpullm" run "$models/llama-gqa" --prompt-ids 1,2 --parallel pipeline
# Under mpirun, rank 0 names the problem; mpirun adds its own lines, so only the status and the
# message are checked.
expect_failure "--layer-split: counts more than the model's 3 layers" \
  "$mpiexec" -n 2 "$tpullm" run gqa.bundle --prompt-ids 1,2 --parallel pipeline --layer-split 2,2

# bench on 2 ranks: rank 0's traffic and both ranks' reports, every round trip served by rank 1.
bj=$("$mpiexec" -n 2 "$tpullm" bench gqa.bundle --parallel pipeline --prompt 16 --context 16 \
  --repeat 1 --decode-steps 4 --threads 1 --json 2>/dev/null | tr -d '\n' | tr -s ' ')
trips=$(printf '%s' "$bj" | grep -o '"round_trips": [0-9]*' | cut -d' ' -f2)
calls=$(printf '%s' "$bj" | grep -o '"calls": [0-9]*' | cut -d' ' -f2 | sort -u)
if [ -n "$trips" ] && [ "$trips" -gt 0 ] && [ "$calls" = "$trips" ] &&
  printf '%s' "$bj" | grep -q '"rank": 1, "layers": \[ [12], 3 \]' &&
  printf '%s' "$bj" | grep -q '"contention": { "skipped": "--parallel pipeline" }'; then
  echo "ok: bench on 2 ranks: $trips round trips, each served by rank 1"
else
  fail=1
  echo "FAIL: bench on 2 ranks: round trips '$trips', calls '$calls': $bj"
fi

# --memory-budget: a bundle of 6 layers of the 0.5B shape (about 190 MB) is refused by one
# process under a budget of 170 MiB and runs on 2 ranks under the same budget, each rank's peak
# resident set within it, with one process's ids.
"$tpullm" make-model --preset qwen2.5-0.5b --layers 6 --vocab 8192 --dtype bf16 --seed 3 \
  -o m6 >/dev/null &&
  "$tpullm" compile m6 --mode bf16 --seq-length 256 --max-input-length 32 -o m6.bundle >/dev/null &&
  rm -rf m6 || { echo "FAIL: the 6-layer model"; exit 1; }
expect 2 "--memory-budget: this process needs [0-9]+ MiB: [0-9]+ of weights \(layers \[0, 6\) and the embedding / lm_head\).*more than the budget of 170 MiB; run it over several processes" \
  "$tpullm" run m6.bundle --prompt-ids 5,6,7 -n 8 --threads 1 --memory-budget 170
ref6=$("$tpullm" run m6.bundle --prompt-ids 5,6,7 -n 8 --ignore-eos --threads 1 -q)
got6=$("$mpiexec" -n 2 "$tpullm" run m6.bundle --prompt-ids 5,6,7 -n 8 --ignore-eos --threads 1 \
  -q --parallel pipeline --memory-budget 170 2>&1)
if [ -n "$ref6" ] && [ "$got6" = "$ref6" ]; then
  echo "ok: 2 ranks within --memory-budget 170: the ids of one process"
else
  fail=1
  echo "FAIL: 2 ranks under --memory-budget 170: '$got6', one process: '$ref6'"
fi
expect_failure "--parallel pipeline: rank [01]: .*--memory-budget: rank [01] needs [0-9]+ MiB.*split it over more ranks" \
  "$mpiexec" -n 2 "$tpullm" run m6.bundle --prompt-ids 5,6,7 -n 8 --threads 1 \
  --parallel pipeline --memory-budget 40
rm -f m6.bundle

# A rank killed mid-run: every rank ends, mpirun exits non-zero, within 60 s. A model slow enough
# to be caught running: 6 layers of hidden 64 and a 150k vocabulary, 2000 tokens.
# With Qwen3's tokenizer and chat template beside it, it also serves the chat case.
"$tpullm" make-model --preset tiny --layers 6 --vocab 151936 --seed 1 -o tiny >/dev/null &&
  cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" tiny/ &&
  "$tpullm" compile tiny -o tiny.bundle --seq-length 2048 --max-input-length 16 >/dev/null ||
  { echo "FAIL: tiny model"; exit 1; }
same_chat 'What is a pipeline?' tiny.bundle "$mpiexec" -n 2 "$tpullm" chat tiny.bundle \
  --parallel pipeline
kill_a_rank 3 "tpullm run tiny.bundle" "$mpiexec" -n 3 "$tpullm" run tiny.bundle --prompt-ids 1,2,3 \
  -n 2000 --ignore-eos --threads 1 --parallel pipeline -q
exit $fail
