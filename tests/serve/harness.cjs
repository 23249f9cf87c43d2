// Shared pieces of the serve tests: start `tpullm serve` on a free loopback port (--port 0, the
// port read from its log), stop it with SIGTERM (it must exit 0 and write nothing to stdout), run
// other tpullm commands, and load the pinned OpenAI SDK. Environment: TPULLM (the driver),
// BUNDLE (the test bundle), OPENAI_SDK (the SDK's package directory).
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const assert = require('node:assert/strict');
const fs = require('node:fs');

// cli() blocks the event loop (spawnSync): a keep-alive socket the server closed meanwhile (its
// 5 s idle timeout; an oracle run on a loaded machine takes longer) would be reused and fail
// with "other side closed". Every request of the tests (the SDK's too) has its own connection.
const plainFetch = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('connection', 'close');
  return plainFetch(input, { ...init, headers });
};

const tpullm = process.env.TPULLM;
const bundle = process.env.BUNDLE;

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function startServer(args = [], file = bundle) {
  const proc = spawn(tpullm, ['serve', file, '--port', '0', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (log += d));
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => {
    // A server that dies under a test says so, with its log (the test then fails on its own).
    if (code !== 0 && signal !== 'SIGKILL' && signal !== 'SIGTERM')
      console.error(`server exited (code ${code}, signal ${signal}); log:\n${log}`);
    resolve({ code, signal });
  }));
  // A failing test must not leave its server behind.
  process.on('exit', () => proc.exitCode === null && proc.signalCode === null && proc.kill('SIGKILL'));
  const port = await withTimeout(
    new Promise((resolve, reject) => {
      proc.stderr.on('data', () => {
        const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
        if (m) resolve(Number(m[1]));
      });
      exited.then((r) => reject(new Error(`server exited (${r.code}) before listening: ${log}`)));
    }),
    30000,
    'server start'
  );
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    proc,
    exited,
    log: () => log,
    async stop() {
      proc.kill('SIGTERM');
      const r = await withTimeout(exited, 15000, 'server exit after SIGTERM');
      assert.equal(r.code, 0, `server exit status after SIGTERM; log:\n${log}`);
      assert.equal(out, '', 'the server writes nothing to stdout');
      return r;
    },
  };
}

/// Runs `tpullm ARGS` (stdin from `input`); returns {status, stdout, stderr}.
function cli(args, input) {
  const r = spawnSync(tpullm, args, { input, encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/// The greedy answer of `tpullm run FILE --chat USER --system SYSTEM -n N`: its text, token count
/// and whether it stopped at an end-of-sequence token.
function runChat(file, system, user, n) {
  const r = cli(['run', file, '--chat', user, '--system', system, '-n', String(n),
    '--temperature', '0']);
  assert.equal(r.status, 0, r.stderr);
  const m = r.stderr.match(/stopped: (.*) after (\d+) tokens/);
  assert.ok(m, r.stderr);
  return { text: r.stdout.replace(/\n$/, ''), tokens: Number(m[2]), eos: m[1] === 'eos' };
}

/// POSTs `body` (greedy, at most `n` tokens unless it says otherwise) to the chat completions
/// endpoint of `server`; asserts 200 and returns the parsed answer.
async function postChat(server, body, n) {
  const r = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ max_tokens: n, temperature: 0, ...body }),
  });
  assert.equal(r.status, 200);
  return r.json();
}

function sdk() {
  const dir = process.env.OPENAI_SDK;
  if (!dir || !fs.existsSync(`${dir}/package.json`))
    throw new Error(`the OpenAI SDK is not at '${dir}': run scripts/fetch-openai-sdk.sh`);
  return require(dir);
}

/// Runs the named async tests in order; exits 1 on the first failure.
async function main(tests) {
  for (const [name, fn] of tests) {
    const t0 = Date.now();
    try {
      await fn();
    } catch (e) {
      console.error(`FAIL ${name}: ${e.stack || e}${e.cause ? `\ncause: ${e.cause.stack || e.cause}` : ''}`);
      process.exit(1);
    }
    console.log(`ok ${name} (${Date.now() - t0} ms)`);
  }
}

module.exports = { startServer, cli, runChat, postChat, sdk, main, withTimeout, assert, bundle };
