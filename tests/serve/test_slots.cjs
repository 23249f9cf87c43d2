// Slots, queue, disconnects and shutdown: two concurrent streams on two slots both complete with
// the answers they get alone; with every slot busy and the queue full a request gets 503 at
// once; a client that goes away mid-stream frees its slot (the queued request then runs);
// SIGTERM mid-stream ends the stream and the server exits 0. BUNDLE is the short test bundle,
// LONG_BUNDLE one with a long sequence (generations that last until cancelled).
'use strict';
const { startServer, main, assert, withTimeout } = require('./harness.cjs');

const json = { 'content-type': 'application/json' };

/// Opens a streaming completion and waits for its first content event; returns the response,
/// its reader, the text so far and the controller that aborts it.
async function openStream(url, body) {
  const controller = new AbortController();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: json, signal: controller.signal,
    body: JSON.stringify({ temperature: 0, stream: true, ...body }),
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!/"text":"[^"]/.test(text)) {
    const { value, done } = await reader.read();
    assert.ok(!done, `stream ended early: ${text}`);
    text += decoder.decode(value, { stream: true });
  }
  return { res, reader, controller, text };
}

async function readAll(reader) {
  const decoder = new TextDecoder();
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text;
    text += decoder.decode(value, { stream: true });
  }
}

async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  assert.ok(m, `${name} in /metrics`);
  return Number(m[1]);
}

async function streamedText(url, prompt) {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: json,
    body: JSON.stringify({ messages: [{ role: 'user', content: prompt }], max_tokens: 24,
      temperature: 0, stream: true }),
  });
  const body = await readAll(res.body.getReader());
  assert.ok(body.endsWith('data: [DONE]\n\n'));
  let text = '';
  for (const ev of body.split('\n\n'))
    if (ev.startsWith('data: {')) text += JSON.parse(ev.slice(6)).choices[0]?.delta?.content || '';
  return text;
}

async function run() {
  const short = await startServer(['--slots', '2']);
  await main([
    ['two concurrent streams on two slots both complete, as alone', async () => {
      const alone = [await streamedText(short.url, 'Tell me a story'),
        await streamedText(short.url, 'What is the capital of France?')];
      // A fresh server state for the slots would not matter: answers do not depend on the slot.
      const both = await Promise.all([streamedText(short.url, 'Tell me a story'),
        streamedText(short.url, 'What is the capital of France?')]);
      assert.deepEqual(both, alone);
      assert.equal(await metric(short.url, 'tpullm_slots'), 2);
    }],
  ]);
  await short.stop();

  const long = process.env.LONG_BUNDLE;
  const server = await startServer(['--slots', '2', '--max-queue', '1'], long);
  const forever = { prompt: 'Once upon a time', max_tokens: 1900 };
  await main([
    ['slots busy and queue full -> 503; a disconnect frees a slot for the queued request',
      async () => {
        const a = await openStream(server.url, forever);
        // A short request on the other slot is answered while the long one goes on (the
        // scheduler interleaves slots token by token): it is the first generation to finish.
        const quick = await fetch(`${server.url}/v1/completions`, {
          method: 'POST', headers: json,
          body: JSON.stringify({ prompt: 'Hi', max_tokens: 3, temperature: 0 }),
        });
        assert.equal(quick.status, 200);
        assert.equal(await metric(server.url, 'tpullm_generations_total'), 1);
        assert.equal(await metric(server.url, 'tpullm_slots_busy'), 1);
        const b = await openStream(server.url, { ...forever, prompt: 'In a galaxy far away' });
        assert.equal(await metric(server.url, 'tpullm_slots_busy'), 2);
        // The third waits in the queue ...
        const queued = fetch(`${server.url}/v1/completions`, {
          method: 'POST', headers: json,
          body: JSON.stringify({ prompt: 'Hello', max_tokens: 3, temperature: 0 }),
        });
        for (let i = 0; i < 100 && (await metric(server.url, 'tpullm_queue_depth')) < 1; ++i)
          await new Promise((r) => setTimeout(r, 20));
        assert.equal(await metric(server.url, 'tpullm_queue_depth'), 1);
        // ... and the fourth is refused at once.
        const full = await fetch(`${server.url}/v1/completions`, {
          method: 'POST', headers: json, body: JSON.stringify({ prompt: 'Hi', max_tokens: 3 }),
        });
        assert.equal(full.status, 503);
        assert.equal(full.headers.get('retry-after'), '1');
        assert.equal((await full.json()).error.code, 'queue_full');
        // The first client goes away: its slot takes the queued request, which completes.
        a.controller.abort();
        const done = await withTimeout(queued, 20000, 'the queued request after a disconnect');
        assert.equal(done.status, 200);
        assert.ok((await done.json()).usage.completion_tokens >= 1);
        b.controller.abort();
        for (let i = 0; i < 200 && (await metric(server.url, 'tpullm_slots_busy')) > 0; ++i)
          await new Promise((r) => setTimeout(r, 20));
        assert.equal(await metric(server.url, 'tpullm_slots_busy'), 0, 'disconnects free slots');
      }],
    ['SIGTERM mid-stream ends the stream and the server exits 0', async () => {
      const s = await openStream(server.url, forever);
      server.proc.kill('SIGTERM');
      const rest = await withTimeout(readAll(s.reader).catch((e) => `closed: ${e}`), 15000,
        'the stream after SIGTERM');
      assert.ok(/shutting down|closed/.test(rest), rest);
      const r = await withTimeout(server.exited, 15000, 'exit after SIGTERM');
      assert.equal(r.code, 0, server.log());
      assert.match(server.log(), /stopped\n$/);
    }],
  ]);
}

run().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
