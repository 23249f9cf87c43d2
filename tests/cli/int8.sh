#!/usr/bin/env bash
# --mode int8 through the CLI: `tpullm calibrate` end to end (deterministic: two runs and two
# thread counts write byte-equal tables; ids and text samples), the table refused for another
# model and when malformed (one-line errors, exit 2), static int8 through verify at its bound, and
# the int8 option refusals.
# Usage: int8.sh TPULLM MODELS_DIR WORK_DIR
set -u
tpullm=$1 models=$2 work=$3
. "$(dirname "$0")/expect.sh"
work_in "$work"
llama=$models/llama-gqa
qwen3=$models/qwen3-headdim

# Deterministic tables: the same bytes twice, and on 2 threads.
expect 0 "wrote a.json" "$tpullm" calibrate "$llama" -o a.json
expect 0 "wrote b.json" "$tpullm" calibrate "$llama" -o b.json
expect 0 "wrote c.json" "$tpullm" calibrate "$llama" -o c.json --threads 2
cmp a.json b.json || { fail=1; echo "FAIL: two calibrate runs differ"; }
# A budget below the model's widened weights (3 layers of 1.41 MiB, f64): every sample widens
# them again, the table is the same bytes, the store stays within the budget.
expect 0 "peaked at 1\.[0-9]+ of 2\.00 MiB" "$tpullm" calibrate "$llama" -o m.json --memory-budget 2
expect 0 "peaked at 2\.[0-9]+ of 3\.00 MiB" "$tpullm" calibrate "$llama" -o m2.json \
  --memory-budget 3 --threads 2
cmp a.json m.json || { fail=1; echo "FAIL: calibrate --memory-budget 2 changed the table"; }
cmp a.json m2.json || { fail=1; echo "FAIL: calibrate --memory-budget 3 --threads 2 changed the table"; }
expect 2 "--memory-budget: 1.00 MiB cannot hold the 1.41 MiB .* 1 thread.s. use at once .*give at least 2$" \
  "$tpullm" calibrate "$llama" -o t.json --memory-budget 1
expect 2 "--memory-budget: .* 2 thread.s. use at once .*give at least 3 or fewer --threads" \
  "$tpullm" calibrate "$llama" -o t.json --memory-budget 2 --threads 2
# a store larger than the machine is refused before any work, naming the option
expect 2 "--memory-budget: 1073741824 MiB is more than the .* of memory available$" \
  "$tpullm" calibrate "$llama" -o t.json --memory-budget 1073741824
for bad in 0 -1; do
  expect 2 "--memory-budget: must be a whole number of MiB in \[1, 2\^30\], got $bad" \
    "$tpullm" calibrate "$llama" -o t.json --memory-budget "$bad"
done
cmp a.json c.json || { fail=1; echo "FAIL: --threads 2 changed the table"; }
grep -q '"name": "layers.1.down"' a.json || { fail=1; echo "FAIL: no layers.1.down entry"; }
# Samples as token ids; a method per run.
printf '1 2 3 4 5 6 7 8\n\n9 10 11 12 13\n' > ids.txt
expect 0 "on 2 samples .13 tokens, method kl" "$tpullm" calibrate "$llama" -o kl.json \
  --samples ids.txt --method kl
expect 0 "method percentile" "$tpullm" calibrate "$llama" -o p.json --samples ids.txt \
  --method percentile
printf 'hello world\n' > text.txt
expect 2 "text.txt: holds text but .* has no tokenizer.json" "$tpullm" calibrate "$llama" \
  -o t.json --samples text.txt
printf '1 2 999999\n' > big.txt
expect 2 "token id 999999 is outside the vocabulary" "$tpullm" calibrate "$llama" -o t.json \
  --samples big.txt
expect 2 "--method: must be max, percentile or kl, got 'mse'" "$tpullm" calibrate "$llama" \
  -o t.json --method mse
expect 2 "mixture-of-experts" "$tpullm" calibrate "$models/qwen3moe-e16k4" -o t.json
expect 2 "already quantized" "$tpullm" calibrate "$models/llama-gqa-gptq-g32" -o t.json
[ -e t.json ] && { fail=1; echo "FAIL: a refused calibrate wrote t.json"; }

# Static int8 through the compiled programs, from the table (symmetric, asymmetric, smoothed).
expect 0 "all scenarios within 0.8 . max.golden. with argmax agreement >= 0.4 and mean KL <= 0.15" \
  "$tpullm" verify "$llama" --level tpu --mode int8 --act-quant static --calib a.json
expect 0 "all scenarios within 0.9 . max.golden. with argmax agreement >= 0.25 and mean KL <= 0.15" \
  "$tpullm" verify "$llama" --level bundle --mode int8 --act-quant static --act-asymmetric \
  --calib a.json --smooth-alpha 0.5
# Padding rows are not recorded: 8 ids through the 16-row prefill variant (8 rows of padding)
# give the same table as through an exact 8-row one.
printf '1 2 3 4 5 6 7 8\n' > ids8.txt
expect 0 "wrote p16.json" "$tpullm" calibrate "$llama" -o p16.json --samples ids8.txt
expect 0 "wrote p8.json" "$tpullm" calibrate "$llama" -o p8.json --samples ids8.txt \
  --max-input-length 8 --prefill-lengths none
cmp p16.json p8.json || { fail=1; echo "FAIL: padding rows changed the table"; }
# The table of another model, and malformed ones.
expect 2 "a.json: was measured on another model .llama, [0-9]+ layers" "$tpullm" verify "$qwen3" \
  --level tpu --mode int8 --act-quant static --calib a.json
printf '{"format_version": 1, "model": ' > broken.json
expect 2 "broken.json: is not a calibration table" "$tpullm" compile "$llama" -o x.bundle \
  --mode int8 --act-quant static --calib broken.json
sed 's/"threshold": [0-9.e+-]*/"threshold": 1e30/' a.json > over.json
expect 2 "over.json: inputs.0. .layers.0.q.: threshold 1e.30 is outside" "$tpullm" compile \
  "$llama" -o x.bundle --mode int8 --act-quant static --calib over.json
expect 2 "no-such.json" "$tpullm" compile "$llama" -o x.bundle --mode int8 --act-quant static \
  --calib no-such.json
[ -e x.bundle ] && { fail=1; echo "FAIL: a refused compile wrote x.bundle"; }

# Option refusals, before the work.
expect 2 "--act-quant: static needs a calibration table: --calib FILE" "$tpullm" compile \
  "$llama" -o x.bundle --mode int8 --act-quant static
expect 2 "--act-quant: must be dynamic or static, got 'row'" "$tpullm" compile "$llama" \
  -o x.bundle --mode int8 --act-quant row
expect 2 "--act-asymmetric: applies only to --act-quant static" "$tpullm" compile "$llama" \
  -o x.bundle --mode int8 --act-asymmetric
expect 2 "--smooth-alpha: must be in .0, 1. .typical 0.5., got 1.5" "$tpullm" compile "$llama" \
  -o x.bundle --mode int8 --smooth-alpha 1.5 --calib a.json
expect 2 "--smooth-alpha: needs a calibration table" "$tpullm" compile "$llama" -o x.bundle \
  --mode int8 --smooth-alpha 0.5
expect 2 "--calib: applies only to --mode int8" "$tpullm" compile "$llama" -o x.bundle \
  --mode w8a16 --calib a.json
expect 2 "--act-quant: applies only to --mode int8" "$tpullm" compile "$llama" -o x.bundle \
  --mode bf16 --act-quant static
expect 2 "qwen3moe-e16k4: --act-quant static does not cover mixture-of-experts layers" "$tpullm" compile \
  "$models/qwen3moe-e16k4" -o x.bundle --mode int8 --act-quant static --calib a.json
expect 2 "llama-gqa-gptq-g32: --mode int8 quantizes float weights; 'model.layers.0.self_attn.q_proj.qweight' is already quantized" \
  "$tpullm" compile "$models/llama-gqa-gptq-g32" -o x.bundle --mode int8
expect 2 "--act-quant: is used only by the compiled levels" "$tpullm" verify "$llama" \
  --act-quant static
[ -e x.bundle ] && { fail=1; echo "FAIL: a refused compile wrote x.bundle"; }
# -o onto a file the command reads: refused before any work, the file left as it was.
cp a.json keep.json
expect 2 "is the --calib file 'keep.json' this command reads" "$tpullm" compile "$llama" \
  -o keep.json --mode int8 --act-quant static --calib keep.json
cmp a.json keep.json || { fail=1; echo "FAIL: compile -o onto its --calib file changed it"; }
cp ids.txt keep.txt
expect 2 "is the --samples file 'keep.txt' this command reads" "$tpullm" calibrate "$llama" \
  -o keep.txt --samples keep.txt
cmp ids.txt keep.txt || { fail=1; echo "FAIL: calibrate -o onto its --samples file changed it"; }
# bench judges an int8 bundle's prefill against the peak of the integer unit it runs on too
# (after tokens/s, TTFT, GFLOP/s, the FMA peak near the row and its two fractions).
"$tpullm" compile "$llama" -o i8.bundle --mode int8 --seq-length 128 --max-input-length 8 \
  --prefill-lengths none >/dev/null || { fail=1; echo "FAIL: int8 compile for bench"; }
expect 0 "^ +8 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9.]+ of the [a-z0-9-]+ int8 peak \([0-9]+ GOP/s\)|int8 path portable: no measured peak)" \
  "$tpullm" bench i8.bundle --prompt 8 --context 8 --decode-steps 2 --repeat 1 --no-contention
rm -f i8.bundle
exit $fail
