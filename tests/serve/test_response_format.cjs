// response_format through the official OpenAI SDK on the random-weight bundle: json_schema
// answers (a schema with finitely many values, so every answer ends within max_tokens) parse and
// validate with ajv (pinned, scripts/fetch-validators.sh) for many seeds, plain and streamed;
// json_object answers that end are one JSON object; a schema outside the subset, a bad type and a
// forced tool call beside a response_format are 400 naming response_format; text is free text.
'use strict';
const path = require('node:path');
const { startServer, sdk, main, assert } = require('./harness.cjs');

const mod = sdk();
const OpenAI = mod.OpenAI || mod.default || mod;
const Ajv = require(path.join(process.env.OPENAI_SDK, '..', 'ajv'));
const ajv = new (Ajv.default || Ajv)({ strict: false });
const { z } = require(path.join(process.env.OPENAI_SDK, '..', 'zod'));
const { zodResponseFormat } = require(path.join(process.env.OPENAI_SDK, 'helpers', 'zod'));

const schema = {
  type: 'object',
  properties: {
    mood: { enum: ['happy', 'sad', 'neutral'] },
    score: { enum: [1, 2, 3, 4, 5] },
    tags: { type: 'array', items: { type: 'boolean' }, maxItems: 3 },
  },
  required: ['mood', 'score', 'tags'],
  additionalProperties: false,
};

async function run() {
  const server = await startServer(['--slots', '2']);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const base = { model: 'chat', messages: [{ role: 'user', content: 'Rate this.' }], max_tokens: 64 };
  const json_schema = { type: 'json_schema', json_schema: { name: 'rating', schema, strict: true } };
  const validate = ajv.compile(schema);

  await main([
    ['json_schema answers validate, 12 seeds', async () => {
      for (let seed = 1; seed <= 12; ++seed) {
        const r = await client.chat.completions.create({ ...base, response_format: json_schema, temperature: 1, seed });
        const c = r.choices[0];
        assert.equal(c.finish_reason, 'stop', `seed ${seed}: ${c.message.content}`);
        assert.ok(validate(JSON.parse(c.message.content)), `seed ${seed}: ${ajv.errorsText(validate.errors)}`);
      }
    }],
    ['the SDK zod helper: parse() returns objects its zod schema accepts', async () => {
      // zodResponseFormat writes the JSON Schema (strict: every property required, no others);
      // parse() validates the answer with zod and throws when it does not parse.
      const Rating = z.object({
        mood: z.enum(['happy', 'sad', 'neutral']),
        ok: z.boolean(),
        level: z.enum(['low', 'high']).nullable(),
      });
      for (let seed = 1; seed <= 6; ++seed) {
        const r = await client.chat.completions.parse({
          ...base, response_format: zodResponseFormat(Rating, 'rating'), temperature: 1, seed,
        });
        const c = r.choices[0];
        assert.equal(c.finish_reason, 'stop', `seed ${seed}: ${c.message.content}`);
        assert.ok(c.message.parsed, `seed ${seed}: ${c.message.content}`);
        assert.deepEqual(Rating.parse(c.message.parsed), c.message.parsed);
      }
    }],
    ['a streamed json_schema answer equals the plain one', async () => {
      const body = { ...base, response_format: json_schema, temperature: 1, seed: 7 };
      const plain = await client.chat.completions.create(body);
      const stream = await client.chat.completions.create({ ...body, stream: true });
      let text = '';
      for await (const chunk of stream) if (chunk.choices[0] && chunk.choices[0].delta.content) text += chunk.choices[0].delta.content;
      assert.equal(text, plain.choices[0].message.content);
    }],
    ['json_object answers that end are one object', async () => {
      let ended = 0;
      for (let seed = 1; seed <= 6; ++seed) {
        const r = await client.chat.completions.create({ ...base, response_format: { type: 'json_object' }, temperature: 1, seed });
        const c = r.choices[0];
        assert.ok(c.message.content.startsWith('{'), c.message.content);
        if (c.finish_reason !== 'stop') continue; // cut by max_tokens: a prefix only
        ++ended;
        const v = JSON.parse(c.message.content);
        assert.ok(v && typeof v === 'object' && !Array.isArray(v));
      }
      console.log(`  ${ended} of 6 json_object answers ended within 64 tokens`);
    }],
    ['bad response_format values are 400 naming response_format', async () => {
      const bad = [
        { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', not: {} } } },
        { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer', minimum: 3 } } },
        { type: 'json_schema', json_schema: { name: 'x' } },
        { type: 'yaml' },
        'json',
      ];
      for (const response_format of bad)
        await assert.rejects(client.chat.completions.create({ ...base, response_format }),
          (e) => e.status === 400 && e.param === 'response_format', JSON.stringify(response_format));
      const err = await client.chat.completions.create({ ...base, response_format: bad[0] }).catch((e) => e);
      assert.match(err.message, /'not' is not supported/);
      const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object' } } };
      await assert.rejects(client.chat.completions.create({
        ...base, response_format: { type: 'json_object' }, tools: [tool], tool_choice: 'required',
      }), (e) => e.status === 400 && e.param === 'response_format');
    }],
    ['response_format text is free text', async () => {
      const r = await client.chat.completions.create({ ...base, response_format: { type: 'text' }, temperature: 0 });
      const p = await client.chat.completions.create({ ...base, temperature: 0 });
      assert.equal(r.choices[0].message.content, p.choices[0].message.content);
    }],
  ]);
  await server.stop();
}

run();
