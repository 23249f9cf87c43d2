// Greedy answers through the server equal the command line's, token for token: `tpullm run
// --chat` for one turn (a fresh KV cache), `tpullm chat` answering piped JSON messages for a
// later turn, which the server answers from a slot that already holds the earlier turn
// (cached_tokens > 0: only the new suffix is prefilled, through prefill_kv). Text and token
// count must both agree.
'use strict';
const { startServer, cli, runChat, postChat, main, assert, bundle } = require('./harness.cjs');

const N = 12;


/// The same through `tpullm chat` with the whole conversation piped in as JSON.
function chatMessages(messages) {
  const r = cli(['chat', bundle, '-n', String(N), '--temperature', '0'], JSON.stringify(messages));
  assert.equal(r.status, 0, r.stderr);
  const m = r.stderr.match(/prompt tokens prefilled, 0 reused.*; (\d+) tokens, decode.*stopped: (.*)\]/);
  assert.ok(m, r.stderr);
  return { text: r.stdout.replace(/\n$/, ''), tokens: Number(m[1]), eos: m[2] === 'eos' };
}


function same(server, oracle) {
  assert.equal(server.choices[0].message.content, oracle.text);
  assert.equal(server.usage.completion_tokens, oracle.tokens);
  assert.equal(server.choices[0].finish_reason, oracle.eos ? 'stop' : 'length');
}

async function run() {
  const server = await startServer(['--slots', '1']);
  const system = 'Answer briefly.';
  const turn1 = [{ role: 'system', content: system }, { role: 'user', content: 'Hello there' }];
  let first;
  await main([
    ['first turn equals run --chat (nothing cached)', async () => {
      first = await postChat(server, { messages: turn1 }, N);
      assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
      same(first, runChat(bundle, system, 'Hello there', N));
    }],
    ['the same request again: all but the last prompt token reused, same answer', async () => {
      const again = await postChat(server, { messages: turn1 }, N);
      assert.equal(again.usage.prompt_tokens_details.cached_tokens, again.usage.prompt_tokens - 1);
      same(again, runChat(bundle, system, 'Hello there', N));
    }],
    ['second turn with reuse equals chat on the whole conversation', async () => {
      const turn2 = [...turn1, { role: 'assistant', content: first.choices[0].message.content },
        { role: 'user', content: 'And what about the sea?' }];
      const second = await postChat(server, { messages: turn2 }, N);
      assert.ok(second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens,
        JSON.stringify(second.usage));
      same(second, chatMessages(turn2));
    }],
    ['a raw text completion equals run --prompt', async () => {
      const r = cli(['run', bundle, '--prompt', 'Once upon a time', '-n', String(N),
        '--temperature', '0']);
      assert.equal(r.status, 0, r.stderr);
      const m = r.stderr.match(/stopped: (.*) after (\d+) tokens/);
      const res = await fetch(`${server.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: N, temperature: 0 }),
      });
      const j = await res.json();
      assert.equal(j.choices[0].text, r.stdout.replace(/\n$/, ''));
      assert.equal(j.usage.completion_tokens, Number(m[2]));
      // The same prompt as token ids (tpullm tokenize's) gives the same answer.
      const t = cli(['tokenize', bundle, '--text', 'Once upon a time']);
      const ids = t.stdout.match(/ids: ([0-9,]+)/)[1].split(',').map(Number);
      const byIds = await fetch(`${server.url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: ids, max_tokens: N, temperature: 0 }),
      });
      assert.equal((await byIds.json()).choices[0].text, j.choices[0].text);
    }],
  ]);
  await server.stop();
}

run().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
