// The official OpenAI Node SDK against `tpullm serve`: chat (plain and streamed), completions,
// stop strings, max_tokens, models, and refusals surfacing as the SDK's typed errors.
'use strict';
const { startServer, sdk, main, assert } = require('./harness.cjs');

const mod = sdk();
const OpenAI = mod.OpenAI || mod.default || mod;

async function run() {
  const server = await startServer(['--slots', '2']);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const hello = { model: 'chat', messages: [{ role: 'user', content: 'Hello' }], temperature: 0 };
  let answer; // the greedy answer to `hello` with max_tokens 8

  await main([
    ['models.list names the bundle', async () => {
      const list = await client.models.list();
      assert.deepEqual(list.data.map((m) => m.id), ['chat']);
    }],
    ['chat completion', async () => {
      const r = await client.chat.completions.create({ ...hello, max_tokens: 8 });
      assert.equal(r.object, 'chat.completion');
      assert.equal(r.model, 'chat');
      assert.equal(r.choices.length, 1);
      assert.equal(r.choices[0].message.role, 'assistant');
      assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
      if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, 8);
      assert.ok(r.usage.prompt_tokens > 0);
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
      assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
      answer = r.choices[0].message.content;
      assert.ok(answer.length > 0);
    }],
    ['streamed chat equals the plain one', async () => {
      const stream = await client.chat.completions.create({
        ...hello, max_tokens: 8, stream: true, stream_options: { include_usage: true },
      });
      let text = '';
      let finish = null;
      let usage = null;
      let chunks = 0;
      for await (const c of stream) {
        assert.equal(c.object, 'chat.completion.chunk');
        ++chunks;
        if (c.usage) usage = c.usage;
        for (const ch of c.choices) {
          text += ch.delta.content || '';
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
      assert.equal(text, answer);
      assert.ok(chunks >= 3, 'role, content and finish chunks');
      assert.ok(['stop', 'length'].includes(finish));
      assert.ok(usage && usage.completion_tokens >= 1 && usage.completion_tokens <= 8);
      // The same conversation again: its prompt is found in a slot's KV cache.
      assert.ok(usage.prompt_tokens_details.cached_tokens > 0, 'prompt reuse');
    }],
    ['max_tokens bounds the answer', async () => {
      const r = await client.chat.completions.create({ ...hello, max_tokens: 3 });
      const u = r.usage.completion_tokens;
      if (r.choices[0].finish_reason === 'length') assert.equal(u, 3);
      else assert.ok(u <= 3);
      assert.ok(answer.startsWith(r.choices[0].message.content), 'a prefix of the longer answer');
      const m = await client.chat.completions.create({ ...hello, max_completion_tokens: 2 });
      assert.ok(m.usage.completion_tokens <= 2);
    }],
    ['a stop string ends the answer before it', async () => {
      const chars = Array.from(answer);
      assert.ok(chars.length >= 3, `answer '${answer}' is long enough to cut`);
      const stop = chars.slice(2, 3).join('');
      const expected = answer.slice(0, answer.indexOf(stop));
      const r = await client.chat.completions.create({ ...hello, max_tokens: 8, stop: [stop] });
      assert.equal(r.choices[0].message.content, expected);
      assert.equal(r.choices[0].finish_reason, 'stop');
      const stream = await client.chat.completions.create({
        ...hello, max_tokens: 8, stop, stream: true,
      });
      let text = '';
      for await (const c of stream) for (const ch of c.choices) text += ch.delta.content || '';
      assert.equal(text, expected);
    }],
    ['text completion, text and token-id prompts', async () => {
      const r = await client.completions.create({
        model: 'chat', prompt: 'Hello, world', max_tokens: 5, temperature: 0,
      });
      assert.equal(r.object, 'text_completion');
      assert.ok(r.choices[0].text.length > 0);
      assert.ok(r.usage.completion_tokens <= 5 && r.usage.prompt_tokens > 0);
      const s = await client.completions.create({
        model: 'chat', prompt: 'Hello, world', max_tokens: 5, temperature: 0, stream: true,
      });
      let text = '';
      for await (const c of s) text += c.choices.length ? c.choices[0].text : '';
      assert.equal(text, r.choices[0].text);
    }],
    ['sampling with a seed repeats', async () => {
      const req = { ...hello, max_tokens: 6, temperature: 0.9, top_p: 0.9, seed: 7 };
      const a = await client.chat.completions.create(req);
      const b = await client.chat.completions.create(req);
      assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    }],
    ['unknown model -> NotFoundError', async () => {
      await assert.rejects(
        client.chat.completions.create({ ...hello, model: 'gpt-4o' }),
        (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found'
      );
    }],
    ['bad fields -> BadRequestError', async () => {
      for (const bad of [
        { temperature: 'hot' }, { temperature: 3 }, { n: 2 }, { messages: [] },
        { messages: [{ content: 'no role' }] }, { max_tokens: 0 }, { top_p: 0 },
        { frequency_penalty: 1 }, { stop: [1] }, { logprobs: 'yes' },
      ])
        await assert.rejects(
          client.chat.completions.create({ ...hello, ...bad }),
          (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && typeof e.error.message === "string",
          JSON.stringify(bad)
        );
    }],
    ['a prompt longer than the compiled sequence -> BadRequestError', async () => {
      const long = 'word '.repeat(400);
      await assert.rejects(
        client.chat.completions.create({ ...hello, messages: [{ role: 'user', content: long }] }),
        (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded'
      );
    }],
  ]);
  await server.stop();

  const keyed = await startServer(['--slots', '1', '--api-key', 'sesame']);
  await main([
    ['wrong API key -> AuthenticationError', async () => {
      const bad = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
      await assert.rejects(bad.chat.completions.create({ ...hello, max_tokens: 2 }),
        (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
      await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
    }],
    ['right API key works', async () => {
      const good = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: 'sesame', maxRetries: 0 });
      const r = await good.chat.completions.create({ ...hello, max_tokens: 2 });
      assert.ok(r.usage.completion_tokens >= 1);
    }],
  ]);
  await keyed.stop();
}

run().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
