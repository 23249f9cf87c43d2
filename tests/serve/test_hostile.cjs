// tpullm serve against hostile clients (docs/serve.md, "Connections"; issue 40): slow clients
// (headers or body a line at a time) are cut at the whole-request bound while /health answers;
// SIGTERM with such clients connected exits 0 within the stop bound, a second signal at once;
// bodies are bounded by the bytes received whatever the framing (chunked, none, Expect:
// 100-continue) and a form-encoded body over 8 KiB is no 413; a burst of connections,
// pipelined requests and a client that half-closes after sending all get answers; keys (empty
// ones refused, the scheme in any case), a port in use, an escaped log; sampling values the
// float rounding puts out of range refused at the API with the field's name; a prompt near the
// end of the sequence gets as many tokens as `run` gives; a bundle without a tokenizer refused at
// start-up; `chat` refusing a piped JSON list does not suggest /reset. Loopback only; every wait
// is bounded. Environment: as harness.cjs, plus NOTOK_BUNDLE (a bundle without a tokenizer).
'use strict';
const net = require('node:net');
const { startServer, cli, main, withTimeout, assert, bundle } = require('./harness.cjs');

const kRequestTimeout = 2; // --request-timeout of the servers below (seconds)

/// Opens a connection, writes `parts` (strings or Buffers) `gapMs` apart, half-closes when
/// `end`, and collects what the server sends until it closes (or `limitMs`). Resolves with
/// {text, ms (from connect to the close), closed, error}.
function raw(port, parts, { gapMs = 0, end = false, limitMs = 15000 } = {}) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const sock = net.connect(port, '127.0.0.1');
    let text = '';
    let error = null;
    let timer = null;
    const finish = (closed) => {
      clearTimeout(timer);
      sock.destroy();
      resolve({ text, ms: Date.now() - t0, closed, error });
    };
    timer = setTimeout(() => finish(false), limitMs);
    sock.on('data', (d) => (text += d.toString('latin1')));
    sock.on('error', (e) => (error = e.code));
    sock.on('close', () => finish(true));
    sock.on('connect', async () => {
      for (const p of parts) {
        if (sock.destroyed) return;
        sock.write(p);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
      if (end && !sock.destroyed) sock.end();
    });
  });
}

/// The statuses of every HTTP answer in `text`, in order.
function statuses(text) {
  return [...text.matchAll(/HTTP\/1\.1 (\d{3}) [A-Z]/g)].map((m) => Number(m[1]));
}

async function health(url, ms = 1500) {
  const t0 = Date.now();
  const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(ms) });
  assert.equal(r.status, 200);
  return Date.now() - t0;
}

function post(path, body, extra = '') {
  return `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

const completion = JSON.stringify({ prompt: 'Hi', max_tokens: 2, temperature: 0 });

async function slowClients() {
  // --slots 1 --max-queue 0: 5 workers for every route, 2 more for the probes.
  const server = await startServer(['--slots', '1', '--max-queue', '0',
    '--request-timeout', String(kRequestTimeout)]);
  try {
    // 10 clients sending a header line every 300 ms (never finishing), 7 sending their body a
    // byte every 300 ms (each holds a worker: more than there are).
    const headerLines = Array.from({ length: 40 }, (_, i) => `X-Slow-${i}: y\r\n`);
    const slowHeaders = Array.from({ length: 10 }, () =>
      raw(server.port, ['GET /health HTTP/1.1\r\n', ...headerLines], { gapMs: 300 }));
    const body = completion;
    const head = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n`;
    const slowBodies = Array.from({ length: 7 }, () =>
      raw(server.port, [head, ...body.split('')], { gapMs: 300 }));
    await new Promise((r) => setTimeout(r, 500));
    // Probes answer at once while every worker is held.
    for (let i = 0; i < 5; ++i) {
      const ms = await health(server.url);
      assert.ok(ms < 1000, `/health took ${ms} ms while slow clients held the workers`);
      await new Promise((r) => setTimeout(r, 200));
    }
    // Each slow client is cut at the whole-request bound (not per read: each of them sends
    // something every 300 ms) with 408, or 503 when no worker was free for its body.
    for (const r of await Promise.all([...slowHeaders, ...slowBodies])) {
      assert.ok(r.closed, 'a slow client was not disconnected');
      assert.ok(r.ms < (kRequestTimeout + 2) * 1000, `a slow client was served for ${r.ms} ms`);
      const st = statuses(r.text);
      assert.equal(st.length, 1, `one answer to a slow client: ${r.text.slice(0, 200)}`);
      assert.ok(st[0] === 408 || st[0] === 503, `slow client answered ${st[0]}`);
    }
    assert.ok((await fetch(`${server.url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: completion,
    })).ok, 'served after the slow clients');
  } finally {
    await server.stop();
  }
}

async function stopWithSlowClients() {
  const server = await startServer(['--request-timeout', '60']);
  const slow = [
    raw(server.port, ['GET /health HTTP/1.1\r\n', 'X: 1\r\n', 'X: 2\r\n'], { gapMs: 1000, limitMs: 20000 }),
    raw(server.port, [`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{`],
      { limitMs: 20000 }),
  ];
  await new Promise((r) => setTimeout(r, 500));
  const t0 = Date.now();
  server.proc.kill('SIGTERM');
  const r = await withTimeout(server.exited, 8000, 'exit after SIGTERM with slow clients');
  const ms = Date.now() - t0;
  assert.equal(r.code, 0, `exit status; log:\n${server.log()}`);
  assert.ok(ms < 5000, `the server took ${ms} ms to stop`);
  console.log(`stopped in ${ms} ms with slow clients connected`);
  for (const c of await Promise.all(slow))
    assert.ok(c.closed, 'a slow client was left open at exit');
  // A second signal ends it at once, whatever the first is still waiting for.
  const again = await startServer();
  const stream = raw(again.port, [post('/v1/completions', JSON.stringify({
    prompt: 'Hi', max_tokens: 200, stream: true }))], { limitMs: 10000 });
  await new Promise((r) => setTimeout(r, 300));
  again.proc.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 30));
  again.proc.kill('SIGINT');
  const r2 = await withTimeout(again.exited, 3000, 'exit after a second signal');
  assert.ok(r2.code === 0 || (r2.code === 130 && /second signal 2, exiting now/.test(again.log())),
    `after two signals: ${JSON.stringify(r2)}; log:\n${again.log()}`);
  await stream;
}

async function bodyBounds(server) {
  {
    const mib = 1 << 20;
    // Chunked, 2 MiB in 64 KiB chunks: cut at 1 MiB with 413.
    const chunk = Buffer.alloc(65536, 0x20);
    const chunks = [];
    for (let i = 0; i < 32; ++i) chunks.push(`10000\r\n`, chunk, '\r\n');
    let r = await raw(server.port, [
      'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n', ...chunks, '0\r\n\r\n']);
    assert.deepEqual(statuses(r.text), [413], `chunked 2 MiB: ${r.text.slice(0, 300)}`);
    assert.match(r.text, /"code":"body_too_large"/);
    // A chunk-size line that never ends: cut at the bytes read for a request (4 MiB).
    r = await raw(server.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n',
      Buffer.alloc(8 * mib, 0x30)]);
    assert.deepEqual(statuses(r.text), [413], `endless chunk size: ${r.text.slice(0, 300)}`);
    // No length and no chunking: the body runs to the end of the client's side; cut the same.
    r = await raw(server.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n',
      Buffer.alloc(2 * mib, 0x20)], { end: true });
    assert.deepEqual(statuses(r.text), [413], `unframed 2 MiB: ${r.text.slice(0, 300)}`);
    // A declared length over the bound with Expect: 100-continue: 413 before any body is sent.
    r = await raw(server.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n' +
      `Content-Length: ${2 * mib}\r\n\r\n`]);
    assert.deepEqual(statuses(r.text), [413], `Expect with 2 MiB: ${r.text.slice(0, 300)}`);
    // curl -d: form-encoded content type, a body of 20 KiB with Expect: 100-continue: served.
    const big = JSON.stringify({ prompt: 'Hi', max_tokens: 1, user: 'u'.repeat(20000) });
    r = await raw(server.port, [`POST /v1/completions HTTP/1.1\r\nHost: x\r\n` +
      `Content-Type: application/x-www-form-urlencoded\r\nExpect: 100-continue\r\n` +
      `Content-Length: ${big.length}\r\nConnection: close\r\n\r\n`, big]);
    assert.deepEqual(statuses(r.text), [100, 200], `form-encoded 20 KiB: ${r.text.slice(0, 300)}`);
    // A chunked body under the bound is served.
    r = await raw(server.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n' +
      `Connection: close\r\n\r\n${completion.length.toString(16)}\r\n${completion}\r\n0\r\n\r\n`]);
    assert.deepEqual(statuses(r.text), [200], `chunked small: ${r.text.slice(0, 300)}`);
    // A body on a route that takes none is refused without being read.
    r = await raw(server.port, ['POST /v1/models HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n',
      ...chunks]);
    assert.deepEqual(statuses(r.text), [405], `POST /v1/models: ${r.text.slice(0, 300)}`);
  }
}

async function lostConnections(server) {
  {
    // 64 connections at once: each gets an answer (the listen backlog holds them).
    const burst = await Promise.all(Array.from({ length: 64 }, () =>
      raw(server.port, ['GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'])));
    for (const r of burst)
      assert.deepEqual(statuses(r.text), [200], `burst: ${r.error} ${r.text.slice(0, 200)}`);
    // 32 generations at once: each gets 200 or a clean 503 (queue full), none is reset.
    const gens = await Promise.all(Array.from({ length: 32 }, () =>
      raw(server.port, [post('/v1/completions', completion, 'Connection: close\r\n')])));
    for (const r of gens) {
      const st = statuses(r.text);
      assert.ok(st.length === 1 && (st[0] === 200 || st[0] === 503),
        `burst of generations: ${r.error} ${r.text.slice(0, 200)}`);
    }
    // Pipelined: three requests in one write, three answers in order.
    let r = await raw(server.port, ['GET /health HTTP/1.1\r\nHost: x\r\n\r\n' +
      post('/v1/completions', completion) + 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
    assert.deepEqual(statuses(r.text), [200, 200, 200], `pipelined: ${r.text.slice(0, 400)}`);
    // Half-closed after sending: the answer still comes (with a length, and without one).
    r = await raw(server.port, [post('/v1/completions', completion)], { end: true });
    assert.deepEqual(statuses(r.text), [200], `half-closed: ${r.text.slice(0, 300)}`);
    r = await raw(server.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n', completion], { end: true });
    assert.deepEqual(statuses(r.text), [200], `half-closed, no length: ${r.text.slice(0, 300)}`);
  }
}

// One server for the body bounds and the lost connections (a server start takes seconds).
let shared = null;

async function security() {
  let c = cli(['serve', bundle, '--port', '0', '--api-key', '']);
  assert.equal(c.status, 2, c.stderr);
  assert.match(c.stderr, /--api-key: is empty/);
  const env = { ...process.env, TPULLM_API_KEY: '' };
  c = require('node:child_process').spawnSync(process.env.TPULLM, ['serve', bundle, '--port', '0'],
    { env, encoding: 'utf8' });
  assert.equal(c.status, 2, c.stderr);
  assert.match(c.stderr, /TPULLM_API_KEY: is set but empty/);

  const server = await startServer(['--api-key', 'sesame']);
  try {
    for (const [h, want] of [['Bearer sesame', 200], ['bearer sesame', 200], ['BEARER  sesame', 200],
      ['Bearer sesam', 401], ['Bearer sesamex', 401], ['Basic sesame', 401], ['sesame', 401]]) {
      const r = await fetch(`${server.url}/v1/models`, { headers: { authorization: h } });
      assert.equal(r.status, want, `Authorization: ${h}`);
    }
    // A second server on the same port refuses to start.
    c = cli(['serve', bundle, '--port', String(server.port)]);
    assert.equal(c.status, 2, c.stderr);
    assert.match(c.stderr, /cannot listen on 127\.0\.0\.1:\d+/);
    // Decoded newlines and escape sequences of the path are escaped in the log.
    await raw(server.port, ['GET /x%0atpullm%20serve:%20forged%1b[31m HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
    await health(server.url);
    assert.doesNotMatch(server.log(), /^tpullm serve: forged/m);
    assert.ok(!server.log().includes('\x1b'), 'an escape byte reached the log');
    assert.match(server.log(), /GET \/x\\x0atpullm serve: forged\\x1b\[31m 404/);
  } finally {
    await server.stop();
  }
}

async function messages() {
  const server = await startServer();
  try {
    const ask = async (body) => {
      const r = await fetch(`${server.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
      });
      return { status: r.status, json: await r.json() };
    };
    for (const [field, value] of [['top_p', 1e-50], ['repetition_penalty', 1e-300],
      ['repetition_penalty', 1e300]]) {
      const r = await ask({ prompt: 'Hi', max_tokens: 1, temperature: 1, [field]: value });
      assert.equal(r.status, 400, `${field} ${value}: ${JSON.stringify(r.json)}`);
      assert.equal(r.json.error.param, field);
    }
    // Near the end of the sequence (256 positions): as many tokens as `run` gives (the last is
    // sampled and never fed): a prompt of 253 gets 4; one of 256 gets 1.
    for (const [n, want] of [[253, 4], [256, 1]]) {
      const r = await ask({ prompt: Array(n).fill(9707), temperature: 0 });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const oracle = cli(['run', bundle, '--prompt-ids', Array(n).fill(9707).join(','), '-n', '100']);
      assert.equal(oracle.status, 0, oracle.stderr);
      const ran = oracle.stdout.trim().split('\n').pop().split(',').length;
      assert.equal(r.json.usage.completion_tokens, ran, `prompt ${n}: serve against run`);
      if (r.json.choices[0].finish_reason === 'length')
        assert.equal(r.json.usage.completion_tokens, want, JSON.stringify(r.json));
    }
  } finally {
    await server.stop();
  }
  const c = cli(['serve', process.env.NOTOK_BUNDLE, '--port', '0']);
  assert.equal(c.status, 2, c.stderr);
  assert.match(c.stderr, /no tokenizer.*serve reads prompts and writes answers as text/);
  assert.equal(c.stderr.trim().split('\n').length, 1, c.stderr);
  // A refused piped list of messages does not point to /reset.
  const long = JSON.stringify([{ role: 'user', content: 'word '.repeat(400) }]);
  const chat = cli(['chat', bundle, '--no-stats'], long);
  assert.equal(chat.status, 2, chat.stderr);
  assert.doesNotMatch(chat.stderr, /\/reset/);
}

main([
  ['slow clients are cut at the request bound while /health answers', slowClients],
  ['SIGTERM with slow clients exits 0 within the bound; a second signal at once', stopWithSlowClients],
  ['bodies are bounded whatever their framing', async () => {
    shared = await startServer(['--slots', '1', '--max-queue', '2', '--request-timeout', '5']);
    await bodyBounds(shared);
  }],
  ['bursts, pipelined requests and half-closed clients are answered', async () => {
    try {
      await lostConnections(shared);
    } finally {
      await shared.stop();
    }
  }],
  ['keys, ports and the log', security],
  ['sampling bounds, the end of the sequence, start-up and chat messages', messages],
]);
