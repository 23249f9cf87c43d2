// Load on a running `tpullm serve` (a benchmark, not a test). For each client count C, C
// concurrent streaming greedy completions, each client sending R requests one after another
// (distinct prompts, so no prefix reuse between them). Measured at the client: time to first
// token (request sent -> first text event; queue wait included), per-request decode tokens/s
// ((completion_tokens - 1) / (last event - first event)), and aggregate decode tokens/s (every
// request's tokens after its first / the wall time of the run less the mean time to first
// token). Then the shared-system-prompt case: a cold chat request with a long system prompt
// no slot holds, against one that repeats it with another user message (the slot's cache holds
// the prefix: only the new turn is prefilled).
// Usage: node bench/serve_load.cjs URL [CLIENTS=1,2,4,8] [MAX_TOKENS=64] [REQUESTS=2] [--json]
'use strict';
const args = process.argv.slice(2);
const asJson = args.includes('--json');
const [url, clientList = '1,2,4,8', maxTokens = '64', requests = '2'] =
  args.filter((a) => a !== '--json');

const words = ['river', 'stone', 'lantern', 'harbor', 'meadow', 'comet', 'violin', 'orchard',
  'glacier', 'market', 'falcon', 'library', 'canyon', 'ember', 'island', 'thunder'];
let serial = 0;
function freshPrompt() { // distinct from every other prompt from its first words on
  const n = serial++;
  return `${words[n % 16]} ${words[(n >> 4) % 16]} ${n}: Once upon a time, in a small town by the sea`;
}

async function stream(path, body) {
  const t0 = performance.now();
  const res = await fetch(`${url}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, temperature: 0, stream: true,
      stream_options: { include_usage: true } }),
  });
  if (res.status !== 200) throw new Error(`status ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '', first = null, last = null, usage = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: {')) continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) usage = j.usage;
      const c = j.choices && j.choices[0];
      if (c && ((c.text !== undefined && c.text) || (c.delta && c.delta.content))) {
        last = performance.now();
        if (first === null) first = last;
      }
    }
  }
  const n = usage.completion_tokens;
  return { ttft: (first - t0) / 1e3, tps: n > 1 ? (n - 1) / ((last - first) / 1e3) : 0, n,
    cached: usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0 };
}

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

async function load(clients) {
  const t0 = performance.now();
  const per = await Promise.all([...Array(clients).keys()].map(async () => {
    const rs = [];
    for (let r = 0; r < Number(requests); ++r)
      rs.push(await stream('/v1/completions',
        { prompt: freshPrompt(), max_tokens: Number(maxTokens) }));
    return rs;
  }));
  const wall = (performance.now() - t0) / 1e3;
  const rs = per.flat();
  const decoded = rs.reduce((a, r) => a + r.n - 1, 0);
  const ttfts = rs.map((r) => r.ttft);
  return { clients, requests: rs.length, tokens: rs.reduce((a, r) => a + r.n, 0), wall,
    aggregate_tps: decoded / (wall - mean(ttfts) * Number(requests)),
    per_request_tps: mean(rs.map((r) => r.tps)), ttft_p50: pct(ttfts, 50), ttft_p99: pct(ttfts, 99) };
}

async function prefix() {
  const system = 'You are a careful assistant. ' +
    'Answer in plain words, keep to the facts you are given, say so when you do not know, '.repeat(6);
  const chat = (sys, user) => stream('/v1/chat/completions', { max_tokens: 8,
    messages: [{ role: 'system', content: sys }, { role: 'user', content: user }] });
  const cold = [], warm = [];
  for (let i = 0; i < 3; ++i) {
    const sys = `[${freshPrompt()}] ${system}`; // no slot holds this system prompt
    cold.push(await chat(sys, 'What is a river?'));
    warm.push(await chat(sys, 'And what is a lake?')); // the same system prompt again
  }
  return { cold_ttft: pct(cold.map((r) => r.ttft), 50), warm_ttft: pct(warm.map((r) => r.ttft), 50),
    warm_cached_tokens: warm[0].cached };
}

(async () => {
  await (await fetch(`${url}/health`)).text(); // node loads its HTTP client on the first fetch
  await stream('/v1/completions', { prompt: 'warm up', max_tokens: 4 });
  const rows = [];
  for (const c of clientList.split(',').map(Number))
    rows.push(await load(c));
  const p = await prefix();
  if (asJson) {
    console.log(JSON.stringify({ rows, prefix: p }, null, 2));
    return;
  }
  console.log('clients  requests  tokens  wall s  aggregate tok/s  per-request tok/s  ' +
    'TTFT p50 ms  TTFT p99 ms');
  for (const r of rows)
    console.log(`${String(r.clients).padStart(7)}  ${String(r.requests).padStart(8)}  ` +
      `${String(r.tokens).padStart(6)}  ${r.wall.toFixed(2).padStart(6)}  ` +
      `${r.aggregate_tps.toFixed(1).padStart(15)}  ${r.per_request_tps.toFixed(1).padStart(17)}  ` +
      `${(r.ttft_p50 * 1e3).toFixed(1).padStart(11)}  ${(r.ttft_p99 * 1e3).toFixed(1).padStart(11)}`);
  const one = rows.find((r) => r.clients === 1);
  for (const r of rows)
    if (one && r.clients > 1)
      console.log(`aggregate at ${r.clients} clients = ${(r.aggregate_tps / one.aggregate_tps).toFixed(2)}x one client`);
  console.log(`shared system prompt: cold TTFT ${(p.cold_ttft * 1e3).toFixed(1)} ms, repeated ` +
    `${(p.warm_ttft * 1e3).toFixed(1)} ms (${p.warm_cached_tokens} tokens cached) = ` +
    `${(p.warm_ttft / p.cold_ttft).toFixed(2)}x`);
})().catch((e) => {
  console.error(`serve_load: ${e.stack || e}`);
  process.exit(1);
});
