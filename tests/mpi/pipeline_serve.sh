#!/usr/bin/env bash
# tpullm serve --parallel pipeline under mpirun (docs/distributed.md): four clients at once get
# the greedy answers of a single-process server, on 2 ranks with 2 micro-batches in flight of 3
# steps a round and on 3 ranks with 1 micro-batch; a lone client with --draft prompt-lookup gets
# them too, through verify calls down the pipeline; /metrics counts the pipeline's steps, round
# trips and calls in flight; /v1/embeddings is refused (501) there;
# --memory-budget refuses ranks over it; --micro-batches, --pipeline-steps and --memory-budget
# without --parallel are refused in one line; SIGTERM to mpirun stops every rank within 20 s; a
# rank killed while a streamed answer is in flight ends every rank within 60 s, and the client's
# stream ends without a finish (an error, never a wrong answer). A bundle compiled with
# --tensor-parallel 2 serves the four clients one process's answers on 2 ranks (--parallel
# tensor), and is refused alone or with --micro-batches.
# Usage: pipeline_serve.sh TPULLM MPIEXEC WORK_DIR QWEN3_TOKENIZER_DIR
set -u
tpullm=$1 mpiexec=$2 work=$3 tokenizer=$4
. "$(dirname "$0")/../cli/expect.sh"
work_in "$work"
# Open MPI: root allowed (CI runs as root), more ranks than cores; other MPIs ignore these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

"$tpullm" make-model --preset tiny --layers 6 --vocab 151936 --seed 1 -o tiny >/dev/null &&
  cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" tiny/ &&
  "$tpullm" compile tiny -o tiny.bundle --seq-length 256 --max-input-length 16 \
    --decode-batches 2,4 >/dev/null &&
  "$tpullm" compile tiny -o tinytp.bundle --seq-length 256 --max-input-length 16 \
    --decode-batches 2,4 --tensor-parallel 2 >/dev/null && rm -rf tiny ||
  { echo "FAIL: the tiny model"; exit 1; }

server=
port=
# start NAME CMD...: starts a server (its log NAME.log), waits up to 60 s for its port.
start() {
  local name=$1
  shift
  "$@" >"$name.log" 2>&1 &
  server=$!
  port=
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$name.log")
    [ -n "$port" ] && return 0
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: $name did not start: $(tail -5 "$name.log")"
  kill "$server" 2>/dev/null
  exit 1
}

# answers: four greedy completions sent at once (prompts of 1 to 3 segments), their texts in
# order, one JSON string a line.
answers() {
  node -e '
const url = `http://127.0.0.1:${process.argv[1]}/v1/completions`;
const ask = (i) => fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
  body: JSON.stringify({prompt: `Request ${i} asks about pipelines` + " and ranks".repeat(4 * i),
                        max_tokens: 12, temperature: 0})})
  .then((r) => r.json()).then((j) => JSON.stringify(j.choices ? j.choices[0].text : j));
Promise.all([1, 2, 3, 4].map(ask)).then((t) => console.log(t.join("\n")));' "$port"
}

# stop NAME: SIGTERM to the server (mpirun forwards it); every process gone within 20 s.
stop() {
  local name=$1
  kill -TERM "$server"
  for _ in $(seq 1 200); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$server" 2>/dev/null; then
    fail=1
    echo "FAIL: $name still running 20 s after SIGTERM"
    kill -9 "$server"
  fi
  wait "$server" 2>/dev/null
  for _ in $(seq 1 100); do
    [ "$(pgrep -fc "tpullm serve tiny")" -eq 0 ] && break
    sleep 0.1
  done
  if [ "$(pgrep -fc "tpullm serve tiny")" -ne 0 ]; then
    fail=1
    echo "FAIL: $name left processes after it stopped"
    pkill -9 -f "tpullm serve tiny"
  fi
}

# lone: one greedy completion of a prompt that repeats itself (prompt lookup finds drafts).
lone() {
  curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "one two three four one two three four one two three four one two", "max_tokens": 24, "temperature": 0}' |
    node -e 'let s="";process.stdin.on("data",(d)=>s+=d).on("end",()=>console.log(JSON.stringify(JSON.parse(s).choices[0].text)))'
}

start one "$tpullm" serve tiny.bundle --port 0 --slots 4 --threads 1
ref=$(answers)
ref_lone=$(lone)
stop one
if [ "$(printf '%s\n' "$ref" | grep -c '^"')" -ne 4 ]; then
  echo "FAIL: the single-process answers: $ref"
  exit 1
fi

for case in "2 --micro-batches 2 --pipeline-steps 3" "3 --micro-batches 1"; do
  set -- $case
  np=$1
  shift
  start "pipe$np" "$mpiexec" -n "$np" "$tpullm" serve tiny.bundle --port 0 --slots 4 --threads 1 \
    --parallel pipeline "$@"
  got=$(answers)
  if [ "$got" = "$ref" ] && grep -q "pipeline over $np ranks" "pipe$np.log"; then
    echo "ok: $np ranks, $*: the answers of one process"
  else
    fail=1
    echo "FAIL: $np ranks, $*: '$got', one process: '$ref'; log: $(head -3 "pipe$np.log")"
  fi
  if [ "$np" = 2 ]; then
    metrics=$(curl -s "http://127.0.0.1:$port/metrics")
    steps=$(printf '%s\n' "$metrics" | sed -n 's/^tpullm_pipeline_decode_steps_total //p')
    trips=$(printf '%s\n' "$metrics" | sed -n 's/^tpullm_pipeline_round_trips_total //p')
    flight=$(printf '%s\n' "$metrics" | sed -n 's/^tpullm_pipeline_calls_in_flight_max //p')
    if [ "${steps:-0}" -gt 0 ] && [ "${trips:-0}" -gt "${steps:-0}" ] && [ "${flight:-0}" -ge 2 ]; then
      echo "ok: /metrics under a pipeline: $steps decode steps, $trips round trips, up to $flight in flight"
    else
      fail=1
      echo "FAIL: /metrics under a pipeline: steps '$steps', round trips '$trips', in flight '$flight'"
    fi
    code=$(curl -s -o emb.json -w '%{http_code}' "http://127.0.0.1:$port/v1/embeddings" \
      -H 'Content-Type: application/json' -d '{"input": "a pipeline"}')
    if [ "$code" = 501 ] && grep -q "not served with --parallel pipeline" emb.json; then
      echo "ok: /v1/embeddings under a pipeline -> 501"
    else
      fail=1
      echo "FAIL: /v1/embeddings under a pipeline -> $code: $(cat emb.json)"
    fi
  fi
  stop "pipe$np"
done

# Tensor parallel: every rank runs its share of every call, batched decode included.
start tensor "$mpiexec" -n 2 "$tpullm" serve tinytp.bundle --port 0 --slots 4 --threads 1 \
  --parallel tensor
got=$(answers)
if [ "$got" = "$ref" ] && grep -q "tensor parallel over 2 ranks" tensor.log; then
  echo "ok: 2 tensor-parallel ranks: the answers of one process"
else
  fail=1
  echo "FAIL: 2 tensor-parallel ranks: '$got', one process: '$ref'; log: $(head -3 tensor.log)"
fi
stop tensor
if grep -q "tensor parallel: 2 ranks; [1-9][0-9]* calls" tensor.log &&
  grep -q '"all_reduces": *[1-9]' tensor.log; then
  echo "ok: serve under tensor parallel reports its calls and every rank's all-reduces"
else
  fail=1
  echo "FAIL: serve under tensor parallel did not report its traffic: $(tail -4 tensor.log)"
fi
expect 2 "--micro-batches: applies to --parallel pipeline" \
  "$tpullm" serve tinytp.bundle --port 0 --parallel tensor --micro-batches 2
expect 2 "tinytp.bundle: is split for tensor parallel over 2 ranks: serve it with mpirun -np 2" \
  "$tpullm" serve tinytp.bundle --port 0

start draft "$mpiexec" -n 2 "$tpullm" serve tiny.bundle --port 0 --slots 4 --threads 1 \
  --parallel pipeline --draft prompt-lookup
got=$(lone)
verify=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^tpullm_speculation_verify_calls_total //p')
if [ -n "$ref_lone" ] && [ "$got" = "$ref_lone" ] && [ "${verify:-0}" -gt 0 ]; then
  echo "ok: 2 ranks with --draft prompt-lookup: the answer of one process, $verify verify calls"
else
  fail=1
  echo "FAIL: 2 ranks with --draft prompt-lookup: '$got' ($verify verify calls), one process: '$ref_lone'"
fi
stop draft

# A rank killed mid-answer: 3 ranks, a long streamed answer (2048 positions), rank 1 killed once
# tokens flow.
"$tpullm" make-model --preset tiny --layers 6 --vocab 151936 --seed 1 -o tiny >/dev/null &&
  cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" tiny/ &&
  "$tpullm" compile tiny -o long.bundle --seq-length 2048 --max-input-length 16 >/dev/null &&
  rm -rf tiny || { echo "FAIL: the long model"; exit 1; }
start kill "$mpiexec" -n 3 "$tpullm" serve long.bundle --port 0 --slots 1 --threads 1 \
  --parallel pipeline
curl -sN "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "a long answer", "max_tokens": 2000, "temperature": 0, "stream": true}' \
  >stream.out 2>&1 &
client=$!
for _ in $(seq 1 200); do [ -s stream.out ] && break; sleep 0.1; done
mapfile -t ranks < <(pgrep -f "tpullm serve long.bundle" | grep -v "^$server$")
if [ ${#ranks[@]} -lt 3 ] || [ ! -s stream.out ]; then
  fail=1
  echo "FAIL: the three ranks did not start streaming (${#ranks[@]} ranks)"
  kill "$server" "$client" 2>/dev/null
else
  t0=$(date +%s)
  kill -9 "${ranks[1]}"
  for _ in $(seq 1 600); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
  wait "$server"
  rc=$?
  for _ in $(seq 1 100); do kill -0 "$client" 2>/dev/null || break; sleep 0.1; done
  kill "$client" 2>/dev/null
  for _ in $(seq 1 100); do
    [ "$(pgrep -fc "tpullm serve long.bundle")" -eq 0 ] && break
    sleep 0.1
  done
  left=$(pgrep -fc "tpullm serve long.bundle")
  if [ "$rc" -ne 0 ] && [ "$left" -eq 0 ] && ! grep -q '"finish_reason":"\(length\|stop\)"' stream.out &&
    ! grep -q '\[DONE\]' stream.out; then
    echo "ok: a killed rank ended serve in $(($(date +%s) - t0)) s, status $rc; the stream ended unfinished"
  else
    fail=1
    echo "FAIL: after the kill: status $rc, $left processes left; stream: $(tail -c 300 stream.out)"
    pkill -9 -f "tpullm serve long.bundle"
  fi
fi

# --memory-budget per rank: 10 MiB holds no rank's share of the 92 MB bundle.
expect_failure "--parallel pipeline: rank [01]: .*--memory-budget: rank [01] needs [0-9]+ MiB" \
  "$mpiexec" -n 2 "$tpullm" serve tiny.bundle --port 0 --threads 1 --parallel pipeline \
  --memory-budget 10

expect 2 "--micro-batches: applies to serve only with --parallel pipeline" \
  "$tpullm" serve tiny.bundle --port 0 --micro-batches 2
expect 2 "--memory-budget: applies to serve only with --parallel pipeline" \
  "$tpullm" serve tiny.bundle --port 0 --memory-budget 100
expect 2 "runs on 2 ranks or more: start it with mpirun -np N" \
  "$tpullm" serve tiny.bundle --port 0 --parallel pipeline
expect 2 "--pipeline-steps: applies to serve only with --parallel pipeline" \
  "$tpullm" serve tiny.bundle --port 0 --pipeline-steps 2
expect 2 "--micro-batches: must be in \[1, 64\], got 0" \
  "$tpullm" serve tiny.bundle --port 0 --parallel pipeline --micro-batches 0
exit $fail
