#!/usr/bin/env bash
# curl against `tpullm serve`: the server-sent-event framing of a streamed answer, and the status
# and OpenAI error object of every kind of bad request (malformed JSON, wrong types, invalid
# UTF-8, too many messages, a body over the limit, a prompt over the compiled sequence, unknown
# routes and models, a wrong key), plus a slow client that never finishes its headers (answered
# 408 and closed at the whole-request bound) and one that stalls inside its body, while others
# are served. test_hostile.cjs has the rest of the hostile clients. Usage: curl_test.sh TPULLM BUNDLE WORKDIR
set -euo pipefail
tpullm=$1 bundle=$2 work=$3
mkdir -p "$work"
log="$work/serve.log"
fail() { echo "FAIL: $*" >&2; echo "--- server log:" >&2; cat "$log" >&2; exit 1; }

"$tpullm" serve "$bundle" --port 0 --slots 1 --api-key sesame >"$work/serve.out" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  grep -q 'listening on' "$log" && break
  kill -0 $pid 2>/dev/null || fail "the server exited before listening"
  sleep 0.1
done
port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
[ -n "$port" ] || fail "no port in the log"
url="http://127.0.0.1:$port"
auth=(-H 'Authorization: Bearer sesame')

# expect STATUS CODE-REGEX curl-args...: the status, and an OpenAI error object whose code matches.
expect() {
  local want=$1 code=$2
  shift 2
  local got
  got=$(curl -s -o "$work/body" -w '%{http_code}' "$@")
  [ "$got" = "$want" ] || fail "$* -> $got, expected $want: $(head -c 300 "$work/body")"
  if [ "$want" != 200 ]; then
    grep -Eq '^\{"error":\{"message":"([^"\\]|\\.)+","type":"[a-z_]+","param":(null|"[^"]*"),"code":"'"$code"'"\}\}$' \
      "$work/body" || fail "$* -> not an OpenAI error object with code $code: $(head -c 300 "$work/body")"
  fi
}
chat="$url/v1/chat/completions"
json=(-H 'Content-Type: application/json')

# Server-sent events: only "data: " lines, each followed by one blank line, the last [DONE].
curl -sN -D "$work/headers" "${auth[@]}" "${json[@]}" "$chat" \
  -d '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":5,"temperature":0,"stream":true}' \
  >"$work/sse"
grep -qi '^content-type: text/event-stream' "$work/headers" || fail "SSE content type"
awk 'NR % 2 == 1 && !/^data: ./ { bad = 1 } NR % 2 == 0 && $0 != "" { bad = 1 }
     END { exit bad || NR % 2 }' "$work/sse" || fail "SSE framing: $(cat "$work/sse")"
[ "$(tail -n 2 "$work/sse" | head -n 1)" = "data: [DONE]" ] || fail "SSE does not end with [DONE]"
grep -c '"finish_reason":"\(stop\|length\)"' "$work/sse" | grep -qx 1 || fail "one finish chunk"
grep -q '"delta":{"role":"assistant","content":""}' "$work/sse" || fail "the role chunk"

expect 200 '' "${auth[@]}" "$url/v1/models"
expect 200 '' "$url/health"
expect 401 invalid_api_key "$url/v1/models"
expect 401 invalid_api_key -H 'Authorization: Bearer wrong' "$url/v1/models"
expect 400 invalid_json "${auth[@]}" "${json[@]}" "$chat" -d '{"messages": ['
expect 400 invalid_type "${auth[@]}" "${json[@]}" "$chat" -d '[1, 2]'
expect 400 invalid_type "${auth[@]}" "${json[@]}" "$chat" -d '{"messages": "hi"}'
expect 400 invalid_type "${auth[@]}" "${json[@]}" "$chat" \
  -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":"ten"}'
printf '{"messages":[{"role":"user","content":"\xff\xfe"}]}' >"$work/utf8.json"
expect 400 invalid_json "${auth[@]}" "${json[@]}" "$chat" --data-binary @"$work/utf8.json"
{
  printf '{"messages":['
  for i in $(seq 2000); do printf '{"role":"user","content":"m%d"},' "$i"; done
  printf '{"role":"user","content":"last"}]}'
} >"$work/many.json"
expect 400 invalid_value "${auth[@]}" "${json[@]}" "$chat" --data-binary @"$work/many.json"
head -c 2000000 /dev/zero | tr '\0' ' ' >"$work/huge.json"
expect 413 body_too_large "${auth[@]}" "${json[@]}" "$chat" --data-binary @"$work/huge.json"
ids=$(seq -s, 300 | sed 's/[0-9]\+/1/g')
expect 400 context_length_exceeded "${auth[@]}" "${json[@]}" "$url/v1/completions" \
  -d "{\"prompt\":[$ids]}"
expect 400 invalid_value "${auth[@]}" "${json[@]}" "$url/v1/completions" \
  -d '{"prompt":[1, 99999999]}'
expect 404 unknown_route "${auth[@]}" "$url/v1/images/generations"
expect 400 missing_required_parameter "${auth[@]}" "${json[@]}" "$url/v1/embeddings" -d '{}'
expect 404 model_not_found "${auth[@]}" "${json[@]}" "$chat" \
  -d '{"model":"gpt-4","messages":[{"role":"user","content":"hi"}]}'

# A client that never finishes its headers does not stall anyone; the request bound closes it.
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n' >&3
start=$(date +%s)
expect 200 '' "${auth[@]}" "${json[@]}" "$url/v1/completions" -d '{"prompt":"Hi","max_tokens":2}'
[ $(($(date +%s) - start)) -lt 5 ] || fail "a request waited behind the slow client"
timeout 20 cat <&3 >/dev/null || fail "the slow client's connection was not closed"
exec 3<&-

# A client that sends its headers and then stalls inside its body: the same.
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"prompt":' >&3
start=$(date +%s)
expect 200 '' "${auth[@]}" "${json[@]}" "$url/v1/completions" -d '{"prompt":"Hi","max_tokens":2}'
[ $(($(date +%s) - start)) -lt 5 ] || fail "a request waited behind the client stalled in its body"
timeout 20 cat <&3 >/dev/null || fail "the stalled body's connection was not closed"
exec 3<&-

curl -s "$url/metrics" | grep -q '^tpullm_requests_total{route="other",status="404"} 1$' ||
  fail "metrics: $(curl -s "$url/metrics")"
kill -TERM $pid
wait $pid || fail "exit status $? after SIGTERM"
trap - EXIT
[ ! -s "$work/serve.out" ] || fail "the server wrote to stdout"
echo "curl tests passed"
