// Tool calls through the official OpenAI Node SDK (docs/serve.md "Tool calls"): tools reach the
// chat template (the prompt has exactly the tokens `tpullm tokenize --chat` renders for the same
// messages and tools), a role:tool follow-up renders as transformers would, a streamed answer
// reassembles (content and tool_calls) to the plain one of the same seed, the SDK's runTools
// helper completes, and malformed tool fields are 400 with the field named. The bundle is the
// random-weight one with the Qwen3 tokenizer (qwen_hermes format), compiled long enough (2048
// positions) for Qwen3's tools system prompt.
'use strict';
const { startServer, cli, sdk, main, assert } = require('./harness.cjs');

const mod = sdk();
const OpenAI = mod.OpenAI || mod.default || mod;
const file = process.env.LONG_BUNDLE;
const Ajv = require(require('node:path').join(process.env.OPENAI_SDK, '..', 'ajv'));
const ajv = new (Ajv.default || Ajv)({ strict: false });

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city'],
    },
  },
};
const search = {
  type: 'function',
  function: { name: 'search', parameters: { type: 'object', properties: { q: { type: 'string' } } } },
};
const ask = [{ role: 'user', content: 'Weather in Paris?' }];

/// The prompt's token count as `tpullm tokenize --chat` renders it (the oracle of rendering).
function renderedTokens(messages, tools) {
  const r = cli(['tokenize', file, '--chat', '-', '--json'], JSON.stringify({ messages, tools }));
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout).ids.length;
}

/// A plain answer's content and calls (ids left out: they name the answer).
function plainShape(r) {
  const m = r.choices[0].message;
  return {
    content: m.content,
    calls: (m.tool_calls || []).map((c) => [c.type, c.function.name, c.function.arguments]),
    finish: r.choices[0].finish_reason,
  };
}

function checkAnswer(r) {
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  if (c.message.tool_calls && c.message.tool_calls.length) {
    assert.equal(c.finish_reason, 'tool_calls');
    for (const t of c.message.tool_calls) {
      assert.equal(t.type, 'function');
      assert.ok(typeof t.id === 'string' && t.id.startsWith('call_'));
      assert.ok(['get_weather', 'search'].includes(t.function.name) || t.function.name.length > 0);
      assert.equal(typeof JSON.parse(t.function.arguments), 'object');
    }
  } else {
    assert.equal(typeof c.message.content, 'string');
    assert.ok(['stop', 'length'].includes(c.finish_reason));
  }
}

async function run() {
  const server = await startServer(['--slots', '1'], file);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const base = { model: 'long', max_tokens: 24 };
  const param = (p) => (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === p;

  await main([
    ['the model id', async () => {
      base.model = (await client.models.list()).data[0].id;
    }],
    ['tools reach the chat template', async () => {
      const r = await client.chat.completions.create({ ...base, messages: ask, tools: [weather, search], seed: 1, temperature: 0 });
      checkAnswer(r);
      assert.equal(r.usage.prompt_tokens, renderedTokens(ask, [weather, search]));
      const plain = await client.chat.completions.create({ ...base, messages: ask, max_tokens: 1 });
      assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 50, 'the tools are in the prompt');
      // tool_choice none: the same prompt (tools rendered), the answer is text.
      const none = await client.chat.completions.create({ ...base, messages: ask, tools: [weather], tool_choice: 'none', max_tokens: 4 });
      assert.equal(none.usage.prompt_tokens, renderedTokens(ask, [weather]));
      assert.equal(none.choices[0].message.tool_calls, undefined);
      assert.equal(typeof none.choices[0].message.content, 'string');
      const auto = await client.chat.completions.create({ ...base, messages: ask, tools: [weather], tool_choice: 'auto', parallel_tool_calls: false, max_tokens: 4 });
      checkAnswer(auto);
    }],
    ['a role:tool follow-up renders as transformers would', async () => {
      const calls = [{ id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris", "unit": "celsius"}' } }];
      const messages = [
        ...ask,
        { role: 'assistant', content: null, tool_calls: calls },
        { role: 'tool', tool_call_id: 'call_a', content: '{"temp": 18}' },
      ];
      const r = await client.chat.completions.create({ ...base, messages, tools: [weather] });
      checkAnswer(r);
      // The oracle gets the arguments as an object (as HF templates expect them) and "" for the
      // null content (Qwen3's template fails on null, so serve renders it with "").
      const oracle = [
        ...ask,
        { role: 'assistant', content: '', tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris', unit: 'celsius' } } }] },
        { role: 'tool', tool_call_id: 'call_a', content: '{"temp": 18}' },
      ];
      assert.equal(r.usage.prompt_tokens, renderedTokens(oracle, [weather]));
      // With content, no retry: the same render as the oracle's.
      messages[1].content = 'Let me look.';
      oracle[1].content = 'Let me look.';
      const c = await client.chat.completions.create({ ...base, messages, tools: [weather], max_tokens: 2 });
      assert.equal(c.usage.prompt_tokens, renderedTokens(oracle, [weather]));
    }],
    ['a streamed answer reassembles to the plain one of the same seed', async () => {
      for (const seed of [1, 2, 3]) {
        const req = { ...base, messages: ask, tools: [weather, search], temperature: 1, seed };
        const plain = plainShape(await client.chat.completions.create(req));
        const stream = await client.chat.completions.create({ ...req, stream: true });
        let content = '';
        const calls = [];
        let finish = null;
        for await (const chunk of stream) {
          for (const ch of chunk.choices) {
            content += ch.delta.content || '';
            for (const t of ch.delta.tool_calls || []) {
              if (t.id) {
                assert.equal(t.index, calls.length, 'calls arrive in order, id first');
                calls.push([t.type, t.function.name, t.function.arguments || '']);
              } else {
                calls[t.index][2] += t.function.arguments;
              }
            }
            if (ch.finish_reason) finish = ch.finish_reason;
          }
        }
        assert.deepEqual({ content: calls.length && content === '' ? null : content, calls, finish }, plain, `seed ${seed}`);
      }
    }],
    ['the SDK helper runTools completes', async () => {
      let called = 0;
      const runner = client.chat.completions.runTools({
        ...base,
        messages: ask,
        tools: [{
          type: 'function',
          function: {
            name: 'get_weather',
            parameters: weather.function.parameters,
            parse: JSON.parse,
            function: () => { ++called; return { temp: 18 }; },
          },
        }],
        max_tokens: 16,
      }, { maxChatCompletions: 3 });
      // The helper parses each answer and throws when one hit max_tokens (as the random model's
      // usually do): either ending is the helper working on our answers.
      try {
        const final = await runner.finalChatCompletion();
        assert.equal(final.object, 'chat.completion');
      } catch (e) {
        if (!(e instanceof require(`${process.env.OPENAI_SDK}/error`).LengthFinishReasonError)) throw e;
      }
      assert.ok(runner.messages.length >= 1);
      // Every call the model made went back as a role:tool message and got an answer.
      const toolMessages = runner.messages.filter((m) => m.role === 'tool').length;
      assert.equal(toolMessages, called);
    }],
    ['a forced call (required, named) always yields arguments that validate', async () => {
      // A tool whose arguments have finitely many values, so that every forced answer of the
      // random model completes within max_tokens; ajv (pinned, scripts/fetch-validators.sh) validates.
      const units = {
        type: 'function',
        function: {
          name: 'set_units',
          parameters: {
            type: 'object',
            properties: { unit: { enum: ['celsius', 'fahrenheit', 'kelvin'] }, metric: { type: 'boolean' } },
            required: ['unit', 'metric'],
            additionalProperties: false,
          },
        },
      };
      const toggle = {
        type: 'function',
        function: {
          name: 'toggle',
          parameters: { type: 'object', properties: { on: { type: 'boolean' } }, required: ['on'], additionalProperties: false },
        },
      };
      const validate = ajv.compile(units.function.parameters);
      const validateToggle = ajv.compile(toggle.function.parameters);
      const choices = ['required', { type: 'function', function: { name: 'set_units' } }];
      for (const tool_choice of choices)
        for (let seed = 1; seed <= 6; ++seed) {
          const r = await client.chat.completions.create({
            ...base, max_tokens: 64, messages: ask, tools: [units, toggle], tool_choice,
            temperature: 1, seed,
          });
          const c = r.choices[0];
          const what = `${JSON.stringify(tool_choice)} seed ${seed}: ${JSON.stringify(c.message)}`;
          assert.equal(c.finish_reason, 'tool_calls', what);
          assert.equal(c.message.tool_calls.length, 1, what);
          const call = c.message.tool_calls[0].function;
          if (typeof tool_choice !== 'string') assert.equal(call.name, 'set_units', what);
          if (call.name === 'set_units')
            assert.ok(validate(JSON.parse(call.arguments)), `${what}: ${ajv.errorsText(validate.errors)}`);
          else // 'required' may pick either tool
            assert.ok(call.name === 'toggle' && validateToggle(JSON.parse(call.arguments)), what);
        }
    }],
    ['malformed tool fields are 400 naming the field', async () => {
      const cases = [
        [{ tools: {} }, 'tools'],
        [{ tools: [{ type: 'retrieval' }] }, 'tools[0].type'],
        [{ tools: [{ type: 'function' }] }, 'tools[0].function'],
        [{ tools: [{ type: 'function', function: { name: 'a b' } }] }, 'tools[0].function.name'],
        [{ tools: [weather, weather] }, 'tools[1].function.name'],
        [{ tools: [{ type: 'function', function: { name: 'f', parameters: 'x' } }] }, 'tools[0].function.parameters'],
        [{ tools: Array.from({ length: 129 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } })) }, 'tools'],
        [{ tools: [weather], tool_choice: 'sometimes' }, 'tool_choice'],
        [{ tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
        [{ tool_choice: 'required' }, 'tool_choice'],
        [{ tools: [weather], parallel_tool_calls: 'yes' }, 'parallel_tool_calls'],
        [{ messages: [...ask, { role: 'tool', content: 'x' }] }, 'messages[1].tool_call_id'],
        [{ messages: [...ask, { role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{nope' } }] }] },
          'messages[1].tool_calls[0].function.arguments'],
        [{ messages: [...ask, { role: 'assistant', tool_calls: {} }] }, 'messages[1].tool_calls'],
        [{ messages: [{ role: 'user', content: 'x', tool_calls: [] }] }, 'messages[0].tool_calls'],
      ];
      for (const [bad, p] of cases)
        await assert.rejects(client.chat.completions.create({ ...base, messages: ask, ...bad }), param(p), JSON.stringify(bad).slice(0, 200));
      // Tools are for chat only.
      await assert.rejects(client.completions.create({ model: base.model, prompt: 'x', tools: [weather] }), param('tools'));
    }],
  ]);
  await server.stop();
}

run().catch((e) => {
  console.error(`FAIL: ${e.stack || e}`);
  process.exit(1);
});
