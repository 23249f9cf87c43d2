#!/usr/bin/env bash
# The serve load table of docs/serve.md in one run (a benchmark, not a test): starts `tpullm
# serve` on BUNDLE with SLOTS slots on a free loopback port, drives it with bench/serve_load.cjs
# (1, 2, 4, 8 concurrent streaming clients; a cold vs a repeated shared system prompt), stops it,
# then times single-stream decode of the same bundle with `tpullm bench`. Prints `uptime` first:
# on a shared machine the figures are indicative.
# Usage: bench/serve_bench.sh TPULLM BUNDLE [SLOTS=8] [CLIENTS=1,2,4,8] [MAX_TOKENS=64] [REQUESTS=2]
#        [SINGLE=1] (0: skip the `tpullm bench` row)
# TPULLM_SERVE_ARGS adds options to `tpullm serve` (e.g. "--draft prompt-lookup");
# TPULLM_SERVE_LAUNCH goes before it (e.g. "mpirun -n 2 --bind-to core" with TPULLM_SERVE_ARGS
# "--parallel pipeline --threads 1"): the pipeline's traffic and each rank's busy time are
# printed after the server stops. The single-stream row runs under the same launch with
# TPULLM_BENCH_ARGS (the bench's share of those options).
set -euo pipefail
tpullm=$1 bundle=$2 slots=${3:-8} clients=${4:-1,2,4,8} max_tokens=${5:-64} requests=${6:-2}
single=${7:-1}
here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp)
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
uptime
# shellcheck disable=SC2086 # TPULLM_SERVE_ARGS is split into options on purpose
${TPULLM_SERVE_LAUNCH:-} "$tpullm" serve "$bundle" --port 0 --slots "$slots" --max-queue 16 ${TPULLM_SERVE_ARGS:-} 2>"$log" &
pid=$!
port=
for _ in $(seq 1 600); do
  port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "serve_bench: the server did not start" >&2; cat "$log" >&2; exit 1; }
sed -n 's/^tpullm serve: //p' "$log" | head -1
node "$here/serve_load.cjs" "http://127.0.0.1:$port" "$clients" "$max_tokens" "$requests"
# what speculation did over the whole run (--draft in TPULLM_SERVE_ARGS): verify calls, tokens
# drafted and kept
node -e 'fetch(process.argv[1]).then((r) => r.text()).then((t) => { const m = t.split("\n")
  .filter((l) => l.startsWith("tpullm_speculation_")); if (m.length) console.log(m.join("\n")); })' \
  "http://127.0.0.1:$port/metrics"
kill -TERM "$pid"
wait "$pid" || true
sed -n 's/^tpullm serve: \(pipeline: .*\|tensor parallel: .*\|rank report .*\)/\1/p' "$log"
if [ "$single" != 0 ]; then
  # Launched as the server was, with TPULLM_BENCH_ARGS (e.g. "--parallel tensor --threads 1"):
  # its decode row carries the read ceiling of this run.
  echo "single stream, tpullm bench (same bundle):"
  # shellcheck disable=SC2086
  ${TPULLM_SERVE_LAUNCH:-} "$tpullm" bench "$bundle" --prompt 32 --context 64 --no-contention \
    ${TPULLM_BENCH_ARGS:-} 2>&1 | sed -n '/^decode/,+1p'
fi
uptime
