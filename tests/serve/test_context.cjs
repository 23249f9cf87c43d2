// --context-overflow truncate-middle: a chat longer than the bundle's 256 positions loses its
// earliest turns (said in the X-Tpullm-Context-Truncated header and on the log) and is answered
// as the kept messages are when sent alone; a last turn too long by itself, and a raw completion
// (no message boundaries), are still refused with 400 context_length_exceeded.
'use strict';
const { startServer, main, assert } = require('./harness.cjs');

async function post(url, path, body) {
  const r = await fetch(`${url}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ max_tokens: 8, temperature: 0, ...body }),
  });
  return { status: r.status, header: r.headers.get('x-tpullm-context-truncated'), body: await r.json() };
}

async function run() {
  const server = await startServer(['--slots', '1', '--context-overflow', 'truncate-middle']);
  const long = [{ role: 'system', content: 'Be brief.' }];
  for (let t = 0; t < 12; ++t) {
    long.push({ role: 'user', content: `question ${t}: ` + 'word '.repeat(12) });
    long.push({ role: 'assistant', content: `answer ${t}: ` + 'word '.repeat(12) });
  }
  long.push({ role: 'user', content: 'And now?' });
  await main([
    ['the earliest turns go, the rest answers as when sent alone', async () => {
      const r = await post(server.url, '/v1/chat/completions', { messages: long });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const m = (r.header || '').match(/^messages=(\d+); tokens=(\d+)$/);
      assert.ok(m, `header: ${r.header}`);
      const dropped = Number(m[1]);
      assert.ok(dropped > 0 && dropped % 2 === 0 && dropped < 24, `dropped ${dropped}`);
      assert.ok(Number(m[2]) > 0);
      assert.ok(r.body.usage.prompt_tokens <= 256 - 8, `prompt ${r.body.usage.prompt_tokens}`);
      assert.match(server.log(), /context full: the \d+ earliest messages of a chat/);
      const kept = [long[0], ...long.slice(1 + dropped)];
      const alone = await post(server.url, '/v1/chat/completions', { messages: kept });
      assert.equal(alone.status, 200);
      assert.equal(alone.header, null);
      assert.equal(alone.body.usage.prompt_tokens, r.body.usage.prompt_tokens);
      assert.equal(alone.body.choices[0].message.content, r.body.choices[0].message.content);
    }],
    ['a last turn too long by itself -> 400', async () => {
      const r = await post(server.url, '/v1/chat/completions', {
        messages: [long[0], long[1], long[2], { role: 'user', content: 'word '.repeat(300) }],
      });
      assert.equal(r.status, 400);
      assert.equal(r.body.error.code, 'context_length_exceeded');
      assert.match(r.body.error.message, /without its 1 earlier turn the conversation takes \d+ tokens/);
    }],
    ['a raw completion is not truncated -> 400', async () => {
      const r = await post(server.url, '/v1/completions', { prompt: 'word '.repeat(300) });
      assert.equal(r.status, 400);
      assert.equal(r.body.error.code, 'context_length_exceeded');
    }],
  ]);
  await server.stop();
}

run().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
