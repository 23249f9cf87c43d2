// Load on a running `tpullm serve`: C concurrent streaming completions (ignore_eos-free, greedy)
// of a fixed prompt, each measured at the client: time to first token (request sent -> first
// text event) and decode tokens/s ((completion_tokens - 1) / (last event - first event)), plus
// the aggregate tokens/s over the wall time of the whole batch. A benchmark, not a test.
// Usage: node bench/serve_load.cjs URL [CLIENTS=1] [MAX_TOKENS=64] [PROMPT]
'use strict';
const [url, clients = '1', maxTokens = '64', prompt = 'Once upon a time, in a small town'] =
  process.argv.slice(2);

async function one(i) {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: `${prompt} (${i})`, max_tokens: Number(maxTokens),
      temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
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
      if (j.choices.length && j.choices[0].text) {
        last = performance.now();
        if (first === null) first = last;
      }
    }
  }
  const n = usage.completion_tokens;
  return { ttft: (first - t0) / 1e3, tps: (n - 1) / ((last - first) / 1e3), n };
}

(async () => {
  await (await fetch(`${url}/health`)).text(); // node loads its HTTP client on the first fetch
  const t0 = performance.now();
  const rs = await Promise.all([...Array(Number(clients)).keys()].map(one));
  const wall = (performance.now() - t0) / 1e3;
  const tokens = rs.reduce((a, r) => a + r.n, 0);
  for (const [i, r] of rs.entries())
    console.log(`client ${i}: ${r.n} tokens, time to first token ${(r.ttft * 1e3).toFixed(1)} ms, ` +
      `decode ${r.tps.toFixed(1)} tokens/s`);
  console.log(`${clients} client(s): ${tokens} tokens in ${wall.toFixed(2)} s = ` +
    `${(tokens / wall).toFixed(1)} tokens/s aggregate`);
})();
