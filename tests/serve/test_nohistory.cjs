// A bundle compiled with --no-history (no prefill_kv modules) is served without prompt reuse:
// a repeated request is prefilled whole (cached_tokens 0) and answered the same, and a prompt
// longer than one prefill is refused with 400 instead of failing inside the model.
'use strict';
const { startServer, main, assert } = require('./harness.cjs');

async function post(url, body) {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ max_tokens: 4, temperature: 0, ...body }),
  });
  return { status: r.status, body: await r.json() };
}

async function run() {
  const server = await startServer(['--slots', '1'], process.env.NOHIST_BUNDLE);
  await main([
    ['no reuse without prefill_kv, same answer', async () => {
      const a = await post(server.url, { prompt: 'Hello there' });
      const b = await post(server.url, { prompt: 'Hello there' });
      assert.equal(a.status, 200);
      assert.equal(b.status, 200);
      assert.equal(b.body.usage.prompt_tokens_details.cached_tokens, 0);
      assert.equal(b.body.choices[0].text, a.body.choices[0].text);
    }],
    ['a prompt over one prefill -> 400', async () => {
      const r = await post(server.url, { prompt: 'word '.repeat(40) });
      assert.equal(r.status, 400);
      assert.equal(r.body.error.code, 'context_length_exceeded');
      assert.match(r.body.error.message, /--no-history/);
    }],
  ]);
  await server.stop();
}

run().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
