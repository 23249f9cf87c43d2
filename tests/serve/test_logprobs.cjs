// logprobs through the official OpenAI SDK: chat `logprobs` + `top_logprobs` and completions'
// `logprobs`, plain and streamed. On the greedy answer of a random-weight model: one entry per
// answer token (the eos token excluded), the chosen token the first of its alternatives (greedy
// picks the argmax of the same raw logits), alternatives best first with at most their mass,
// streamed entries equal to the plain ones; and the refusals of bad values with the param named.
// The values themselves are checked against transformers' float64 logits in
// tests/runtime/test_logprobs.cpp.
'use strict';
const { startServer, sdk, main, assert } = require('./harness.cjs');

const mod = sdk();
const OpenAI = mod.OpenAI || mod.default || mod;

async function run() {
  const server = await startServer(['--slots', '1']);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const ask = {
    model: 'chat', messages: [{ role: 'user', content: 'Count to five' }], temperature: 0,
    max_tokens: 10, logprobs: true, top_logprobs: 5,
  };
  let plain;

  const checkEntries = (content, completionTokens, finish) => {
    // The eos token ends the answer but is not part of it.
    assert.equal(content.length, finish === 'stop' ? completionTokens - 1 : completionTokens);
    for (const e of content) {
      assert.equal(typeof e.token, 'string');
      assert.ok(e.logprob <= 0 && e.logprob > -9999, `logprob ${e.logprob}`);
      assert.ok(Array.isArray(e.bytes));
      assert.equal(e.top_logprobs.length, 5);
      assert.equal(e.top_logprobs[0].token, e.token);
      assert.equal(e.top_logprobs[0].logprob, e.logprob);
      let mass = 0;
      for (let i = 0; i < e.top_logprobs.length; ++i) {
        mass += Math.exp(e.top_logprobs[i].logprob);
        if (i > 0) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
      }
      assert.ok(mass <= 1 + 1e-9, `top mass ${mass}`);
    }
  };

  await main([
    ['chat logprobs with top alternatives', async () => {
      const r = await client.chat.completions.create(ask);
      const c = r.choices[0];
      assert.ok(c.logprobs && Array.isArray(c.logprobs.content), JSON.stringify(c.logprobs));
      checkEntries(c.logprobs.content, r.usage.completion_tokens, c.finish_reason);
      plain = r;
    }],
    ['streamed logprobs equal the plain ones', async () => {
      const stream = await client.chat.completions.create({ ...ask, stream: true });
      const content = [];
      let text = '';
      for await (const chunk of stream) {
        const c = chunk.choices[0];
        if (!c) continue;
        if (c.delta && c.delta.content) text += c.delta.content;
        if (c.logprobs && c.logprobs.content) content.push(...c.logprobs.content);
      }
      assert.equal(text, plain.choices[0].message.content);
      assert.deepEqual(content, plain.choices[0].logprobs.content);
    }],
    ['no logprobs unless asked', async () => {
      const r = await client.chat.completions.create({ ...ask, logprobs: undefined, top_logprobs: undefined });
      assert.equal(r.choices[0].logprobs, null);
      const z = await client.chat.completions.create({ ...ask, top_logprobs: 0 });
      for (const e of z.choices[0].logprobs.content) assert.deepEqual(e.top_logprobs, []);
    }],
    ['completions logprobs', async () => {
      const r = await client.completions.create({
        model: 'chat', prompt: 'Once upon a time', temperature: 0, max_tokens: 6, logprobs: 3,
      });
      const lp = r.choices[0].logprobs;
      const n = r.choices[0].finish_reason === 'stop' ? r.usage.completion_tokens - 1
        : r.usage.completion_tokens;
      assert.equal(lp.tokens.length, n);
      assert.equal(lp.token_logprobs.length, n);
      assert.equal(lp.top_logprobs.length, n);
      assert.equal(lp.text_offset.length, n);
      for (let i = 0; i < n; ++i) {
        assert.ok(lp.token_logprobs[i] <= 0);
        const alts = Object.values(lp.top_logprobs[i]);
        assert.ok(alts.length >= 1 && alts.length <= 3);
        assert.equal(Math.max(...alts), lp.token_logprobs[i]); // greedy: the best one
        // Offsets in bytes of the tokens' own texts.
        if (i > 0)
          assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + Buffer.byteLength(lp.tokens[i - 1]));
      }
    }],
    ['bad logprobs values are refused with the param named', async () => {
      const cases = [
        [{ ...ask, logprobs: false, top_logprobs: 2 }, 'top_logprobs'],
        [{ ...ask, top_logprobs: 21 }, 'top_logprobs'],
        [{ ...ask, logprobs: 'yes' }, 'logprobs'],
      ];
      for (const [body, param] of cases) {
        await assert.rejects(client.chat.completions.create(body), (e) => {
          assert.equal(e.status, 400, String(e));
          assert.equal(e.param, param);
          return true;
        });
      }
      await assert.rejects(
        client.completions.create({ model: 'chat', prompt: 'x', max_tokens: 2, logprobs: 6 }),
        (e) => e.status === 400 && e.param === 'logprobs');
    }],
  ]);
  await server.stop();
}

run();
