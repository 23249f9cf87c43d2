// Batched decode through the server: a bundle compiled with --decode-batches 1,2,4 and four slots;
// four concurrent greedy chat requests of different prompt lengths (slots at different history
// lengths, joining and leaving the batch at different steps) each get the answer `tpullm run
// --chat` gives alone (batch-1 decode), token for token, and the metrics show batched calls.
// Then a server with --draft prompt-lookup answers as plain decoding, concurrent chats too, and
// counts the speculation that `run --draft` reports for the same chats sent one at a time (a
// slot drafts only while it generates alone). BATCHED_BUNDLE is that bundle.
'use strict';
const { startServer, cli, runChat, postChat, main, assert } = require('./harness.cjs');

const system = 'Answer briefly.';

const N = 12;
const file = process.env.BATCHED_BUNDLE;



async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  assert.ok(m, `${name} missing`);
  return Number(m[1]);
}

async function run() {
  const server = await startServer(['--slots', '4'], file);
  const users = ['Hello there', 'What is the capital of France? Tell me about it.',
    'Hi', 'Write one line about the sea, the sky and the long road home tonight.'];
  await main([
    ['four concurrent greedy chats equal run --chat alone', async () => {
      const oracle = users.map((u) => runChat(file, system, u, N));
      const answers = await Promise.all(users.map((u) =>
        postChat(server, { messages: [{ role: 'system', content: system }, { role: 'user', content: u }] }, N)));
      for (const [i, a] of answers.entries()) {
        assert.equal(a.choices[0].message.content, oracle[i].text, `client ${i}`);
        assert.equal(a.usage.completion_tokens, oracle[i].tokens, `client ${i}`);
        assert.equal(a.choices[0].finish_reason, oracle[i].eos ? 'stop' : 'length');
      }
      assert.ok(await metric(server.url, 'tpullm_batched_decode_calls_total') > 0);
      assert.ok(await metric(server.url, 'tpullm_batched_decode_rows_total') >
        await metric(server.url, 'tpullm_batched_decode_calls_total'));
    }],
    ['again with prompt reuse: the same answers', async () => {
      const oracle = users.map((u) => runChat(file, system, u, N));
      const answers = await Promise.all(users.map((u) =>
        postChat(server, { messages: [{ role: 'system', content: system }, { role: 'user', content: u }] }, N)));
      for (const [i, a] of answers.entries()) {
        assert.ok(a.usage.prompt_tokens_details.cached_tokens > 0, `client ${i}`);
        assert.equal(a.choices[0].message.content, oracle[i].text, `client ${i}`);
        assert.equal(a.usage.completion_tokens, oracle[i].tokens, `client ${i}`);
      }
    }],
  ]);
  await server.stop();

  // --draft prompt-lookup: each answer is still plain decoding's, concurrent or not, and the
  // server's speculation counters are what `run --draft` reports for the same chats sent one at
  // a time (a slot drafts only while no other slot generates beside it, so concurrent chats
  // draft less).
  const spec = await startServer(['--slots', '2', '--draft', 'prompt-lookup', '--draft-max', '4'],
    file);
  // Prompts whose greedy answers repeat some of their n-grams (so drafts are made and verified).
  const looped = ['x y z x y z x y z x y z', '1 2 1 2 1 2 1 2 1 2 1 2'];
  await main([
    ['two chats with prompt-lookup drafts equal run --chat alone', async () => {
      // run --draft's answer is plain decoding's (tests/runtime/test_speculation.cpp).
      const oracle = [];
      let want = [0, 0, 0];
      for (const u of looped) {
        const r = cli(['run', file, '--chat', u, '--system', system, '-n', '24', '--temperature',
          '0', '--draft', 'prompt-lookup', '--draft-max', '4']);
        assert.equal(r.status, 0, r.stderr);
        const m = r.stderr.match(/speculation: (\d+) verify calls, (\d+) tokens drafted, (\d+) accepted/);
        const t = r.stderr.match(/stopped: .* after (\d+) tokens/);
        assert.ok(m && t, r.stderr);
        want = want.map((w, i) => w + Number(m[i + 1]));
        oracle.push({ text: r.stdout.replace(/\n$/, ''), tokens: Number(t[1]) });
      }
      assert.ok(want[0] > 0, 'run --draft made no verify call: the check would prove nothing');
      const chat = (u) =>
        postChat(spec, { messages: [{ role: 'system', content: system }, { role: 'user', content: u }] }, 24);
      const alone = [];
      for (const u of looped)
        alone.push(await chat(u));
      for (const [i, a] of alone.entries()) {
        assert.equal(a.choices[0].message.content, oracle[i].text, `client ${i}`);
        assert.equal(a.usage.completion_tokens, oracle[i].tokens, `client ${i}`);
      }
      assert.equal(await metric(spec.url, 'tpullm_speculation_verify_calls_total'), want[0]);
      assert.equal(await metric(spec.url, 'tpullm_speculation_drafted_tokens_total'), want[1]);
      assert.equal(await metric(spec.url, 'tpullm_speculation_accepted_tokens_total'), want[2]);
      const together = await Promise.all(looped.map(chat));
      for (const [i, a] of together.entries()) {
        assert.equal(a.choices[0].message.content, oracle[i].text, `concurrent client ${i}`);
        assert.equal(a.usage.completion_tokens, oracle[i].tokens, `concurrent client ${i}`);
      }
    }],
  ]);
  await spec.stop();
}

run().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
