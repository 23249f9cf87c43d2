// POST /v1/embeddings through the official OpenAI SDK: float and base64 answers decode to the
// same float32 vectors (the SDK's default asks for base64 and decodes it), vectors are
// L2-normalized, a batch keeps its order and equals the inputs embedded one by one, token-id
// inputs, `dimensions`, usage; the refusals of bad input with the param named; --pooling mean
// gives other vectors than the default last-token pooling. The values themselves are checked
// against the float64 interpreter in tests/runtime/test_embeddings.cpp.
'use strict';
const { startServer, sdk, main, assert } = require('./harness.cjs');

const mod = sdk();
const OpenAI = mod.OpenAI || mod.default || mod;

function decode(b64) {
  const buf = Buffer.from(b64, 'base64');
  assert.equal(buf.length % 4, 0);
  return Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4));
}

function norm(v) {
  return Math.sqrt(v.reduce((s, x) => s + x * x, 0));
}

async function run() {
  const server = await startServer(['--slots', '1']);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const texts = ['The quick brown fox', 'jumps over', 'the lazy dog, twice over.'];
  let one; // the float embedding of texts[0]

  await main([
    ['a float embedding is a unit vector with usage', async () => {
      const r = await client.embeddings.create({ model: 'chat', input: texts[0], encoding_format: 'float' });
      assert.equal(r.object, 'list');
      assert.equal(r.model, 'chat');
      assert.equal(r.data.length, 1);
      assert.equal(r.data[0].object, 'embedding');
      assert.equal(r.data[0].index, 0);
      one = r.data[0].embedding;
      assert.ok(Array.isArray(one) && one.length > 0);
      assert.ok(one.every((x) => typeof x === 'number' && Number.isFinite(x)));
      assert.ok(Math.abs(norm(one) - 1) < 1e-5, `norm ${norm(one)}`);
      assert.ok(r.usage.prompt_tokens > 0);
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens);
    }],
    ['base64 decodes to the same floats, and the SDK default decodes it itself', async () => {
      const b = await client.embeddings.create({ model: 'chat', input: texts[0], encoding_format: 'base64' });
      assert.equal(typeof b.data[0].embedding, 'string');
      assert.deepEqual(decode(b.data[0].embedding), one);
      const d = await client.embeddings.create({ model: 'chat', input: texts[0] });
      assert.deepEqual(Array.from(d.data[0].embedding), one);
    }],
    ['a batch keeps its order and equals the inputs one by one', async () => {
      const r = await client.embeddings.create({ model: 'chat', input: texts, encoding_format: 'float' });
      assert.equal(r.data.length, texts.length);
      let tokens = 0;
      for (let i = 0; i < texts.length; ++i) {
        assert.equal(r.data[i].index, i);
        const single = await client.embeddings.create({ model: 'chat', input: texts[i], encoding_format: 'float' });
        assert.deepEqual(r.data[i].embedding, single.data[0].embedding, `input ${i}`);
        tokens += single.usage.prompt_tokens;
      }
      assert.deepEqual(r.data[0].embedding, one);
      assert.notDeepEqual(r.data[0].embedding, r.data[1].embedding);
      assert.equal(r.usage.prompt_tokens, tokens);
    }],
    ['token-id inputs, one or several; dimensions equal to the hidden size', async () => {
      const a = await client.embeddings.create({ model: 'chat', input: [11, 22, 33], encoding_format: 'float' });
      const b = await client.embeddings.create({
        model: 'chat', input: [[11, 22, 33], [44, 55]], encoding_format: 'float', dimensions: one.length,
      });
      assert.equal(a.usage.prompt_tokens, 3);
      assert.equal(b.usage.prompt_tokens, 5);
      assert.deepEqual(b.data[0].embedding, a.data[0].embedding);
      assert.equal(b.data[1].embedding.length, one.length);
    }],
    ['bad requests are refused with the param named', async () => {
      const cases = [
        [{ model: 'chat' }, 'input'],
        [{ model: 'chat', input: '' }, 'input'],
        [{ model: 'chat', input: [] }, 'input'],
        [{ model: 'chat', input: [[]] }, 'input'],
        [{ model: 'chat', input: ['a', [1]] }, 'input'],
        [{ model: 'chat', input: [1.5] }, 'input'],
        [{ model: 'chat', input: 7 }, 'input'],
        [{ model: 'chat', input: Array(65).fill('x') }, 'input'],
        [{ model: 'chat', input: Array(300).fill(7) }, 'input'], // the bundle holds 256 tokens
        [{ model: 'chat', input: [999999999] }, 'input'],         // outside the vocabulary
        [{ model: 'chat', input: 'x', encoding_format: 'hex' }, 'encoding_format'],
        [{ model: 'chat', input: 'x', dimensions: one.length + 1 }, 'dimensions'],
        [{ model: 'chat', input: 'x', dimensions: 0 }, 'dimensions'],
      ];
      for (const [body, param] of cases) {
        await assert.rejects(client.embeddings.create(body), (e) => {
          assert.equal(e.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${e}`);
          assert.equal(e.param, param, JSON.stringify(body).slice(0, 80));
          return true;
        });
      }
      await assert.rejects(client.embeddings.create({ model: 'other', input: 'x' }),
        (e) => e.status === 404 && e.param === 'model');
    }],
  ]);
  await server.stop();

  const mean = await startServer(['--slots', '1', '--pooling', 'mean']);
  const mc = new OpenAI({ baseURL: `${mean.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  await main([
    ['--pooling mean gives another unit vector', async () => {
      const r = await mc.embeddings.create({ model: 'chat', input: texts[0], encoding_format: 'float' });
      const v = r.data[0].embedding;
      assert.equal(v.length, one.length);
      assert.ok(Math.abs(norm(v) - 1) < 1e-5, `norm ${norm(v)}`);
      assert.notDeepEqual(v, one);
    }],
  ]);
  await mean.stop();
}

run();
