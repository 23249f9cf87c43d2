// The constrained-output property: on noise (a random-weight model's free output), every answer
// generated under a JSON Schema's grammar that ended where the grammar allowed the end (stop "eos")
// parses as JSON and validates against its schema, checked by ajv (npm, pinned), a validator
// nobody here wrote. Over every schema in SCHEMAS and {"type": "json_object"}, ANSWERS seeds
// each, with the real Qwen3 tokenizer. An answer cut by the token budget is only a prefix and is
// not validated; the test requires most answers of each schema to end (so a grammar that never
// lets an answer finish fails too) and says how many were checked.
// Environment: SAMPLER (tpullm-structured-sample), TOKENIZER, AJV (ajv's package directory),
// SCHEMAS, ANSWERS.
'use strict';
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const assert = require('node:assert/strict');

const Ajv = require(process.env.AJV);
const ajv = new (Ajv.default || Ajv)({ strict: false, allErrors: true });
const answers = Number(process.env.ANSWERS);
const maxTokens = 160;

/// The answers of `cases` from one sampler process (the tokenizer loaded once), grouped per case.
function sample(cases) {
  return new Promise((resolve, reject) => {
    execFile(process.env.SAMPLER, [process.env.TOKENIZER, String(answers), String(maxTokens),
      ...cases.map((c) => `${c.seed}:${c.which}`)], { maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${err.message}\n${stderr}`));
      const outs = cases.map(() => []);
      for (const line of stdout.trim().split('\n')) {
        const a = JSON.parse(line);
        outs[a.case].push(a);
      }
      resolve(cases.map((c, i) => ({ c, out: outs[i] })));
    });
  });
}

async function run() {
  const dir = process.env.SCHEMAS;
  const cases = fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort()
    .map((f) => ({ name: f, which: path.join(dir, f), schema: JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) }));
  cases.push({ name: 'json_object', which: '--json-object', schema: { type: 'object' } });
  assert.ok(cases.length >= 21, `${cases.length} schemas`);
  let checked = 0;
  let total = 0;
  const seeded = cases.map((c, i) => ({ ...c, seed: 1000 * (i + 1) }));
  // Two sampler processes (two cores), each taking every other case.
  const halves = await Promise.all([0, 1].map((h) => sample(seeded.filter((_, i) => i % 2 === h))));
  const results = halves.flat();
  for (const { c, out } of results) {
    const validate = ajv.compile(c.schema);
    let ended = 0;
    for (const a of out) {
      assert.ok(['eos', 'token budget'].includes(a.stop), `${c.name} seed ${a.seed}: stop ${a.stop}`);
      if (a.stop !== 'eos') continue;
      ++ended;
      let value;
      try {
        value = JSON.parse(a.text);
      } catch (e) {
        assert.fail(`${c.name} seed ${a.seed}: not JSON (${e.message}): ${a.text}`);
      }
      if (c.which === '--json-object')
        assert.ok(value !== null && typeof value === 'object' && !Array.isArray(value), `${c.name} seed ${a.seed}: ${a.text}`);
      assert.ok(validate(value), `${c.name} seed ${a.seed}: ${ajv.errorsText(validate.errors)}: ${a.text}`);
    }
    total += out.length;
    checked += ended;
    console.log(`ok ${c.name}: ${ended} of ${out.length} answers ended and validate`);
    assert.equal(out.length, answers);
    assert.ok(ended * 2 >= out.length, `${c.name}: only ${ended} of ${out.length} answers ended within ${maxTokens} tokens`);
  }
  console.log(`${checked} answers validated of ${total}, over ${cases.length} schemas`);
}

run().catch((e) => {
  console.error(`FAIL ${e.stack || e}`);
  process.exit(1);
});
