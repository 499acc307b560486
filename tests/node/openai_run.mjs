// Drives agentloop.ui.openai_app with the official openai-node client (the `openai` package): models, Chat
// Completions and Responses, streamed and not, a wrong key and a refused client tool.
//
//   node openai_run.mjs BASE_URL '[{"key": KEY}]'
//
// Prints one JSON object with what the client parsed.
import OpenAI from 'openai';

const [baseURL, stepsJson] = process.argv.slice(2);
const [{ key }] = JSON.parse(stepsJson);
const client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0 });
const out = {};
const ask = (content) => [{ role: 'user', content }];

out.models = [];
for await (const model of client.models.list()) out.models.push(model.id);

const chat = await client.chat.completions.create({ model: 'm', messages: ask('What is 2 + 3?') });
out.chat = { content: chat.choices[0].message.content, usage: chat.usage, finish: chat.choices[0].finish_reason };
out.chat2 = (await client.chat.completions.create({ model: 'm', messages: ask('Plain?') })).choices[0].message.content;

const stream = await client.chat.completions.create({
  model: 'm', messages: ask('Stream?'), stream: true, stream_options: { include_usage: true },
});
out.chatStream = { text: '', usage: null };
for await (const chunk of stream) {
  if (chunk.choices.length) out.chatStream.text += chunk.choices[0].delta.content ?? '';
  if (chunk.usage) out.chatStream.usage = chunk.usage;
}

out.response = (await client.responses.create({ model: 'm', input: 'Respond?' })).output_text;
out.responseStream = { text: '', last: null };
for await (const event of await client.responses.create({ model: 'm', input: 'Stream a response?', stream: true })) {
  if (event.type === 'response.output_text.delta') out.responseStream.text += event.delta;
  out.responseStream.last = event.type;
}

try {
  await new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 }).models.list();
} catch (error) {
  out.badKey = error.status;
}
try {
  await client.chat.completions.create({
    model: 'm', messages: ask('x'), tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
  });
} catch (error) {
  out.tools = { status: error.status, message: error.message };
}

console.log(JSON.stringify(out));
