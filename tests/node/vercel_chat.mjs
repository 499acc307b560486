// Drives agentloop.ui.vercel_ai_app with the Vercel AI SDK's own chat client: `AbstractChat` (what useChat
// wraps) over `DefaultChatTransport`, which validates every chunk against the SDK's schema.
//
//   node vercel_chat.mjs URL 'STEPS_JSON'
//
// Steps, in order: {"send": text} (with "files": [FileUIPart...] to attach some), {"send": text, "stopAfter": chunkType} (stop() once a chunk of that type
// arrived: the browser's stop button), {"answer": [true | false | reason, ...]} (addToolApprovalResponse for
// each waiting call, in order; the chat re-sends by itself), {"replay": n} (POSTs the body of request n again,
// raw), {"regenerate": true} (the SDK's regenerate(): the last answer again). Prints one JSON object: the messages, errors, and per request its status and chunks.
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';

const [url, stepsJson] = process.argv.slice(2);
const steps = JSON.parse(stepsJson);
const requests = [];
const errors = [];
let stopOn = null;
let chat;

class State {
  status = 'ready';
  error = undefined;
  messages = [];
  pushMessage = m => { this.messages = this.messages.concat(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; };
  snapshot = x => structuredClone(x);
}

class Chat extends AbstractChat {
  constructor(init) { super({ ...init, state: new State() }); }
}

// Records each request's body and the chunks its answer carried (teeing the response stream).
async function recordingFetch(input, init) {
  const record = { body: JSON.parse(init.body), status: 0, chunks: [], done: false };
  requests.push(record);
  const response = await fetch(input, init);
  record.status = response.status;
  record.headers = Object.fromEntries(response.headers.entries());
  if (!response.body) {
    record.done = true;
    return response;
  }
  const [mine, theirs] = response.body.tee();
  (async () => {
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const piece of mine) {
        buffer += decoder.decode(piece, { stream: true });
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const event = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = event.replace(/^data: /, '');
          const chunk = data === '[DONE]' ? { type: '[DONE]' } : JSON.parse(data);
          record.chunks.push(chunk);
          if (stopOn && chunk.type === stopOn) {
            stopOn = null;
            chat.stop();
          }
        }
      }
    } catch (error) {
      record.aborted = String(error);
    } finally {
      record.done = true;
    }
  })();
  return new Response(theirs, { status: response.status, headers: response.headers });
}

chat = new Chat({
  transport: new DefaultChatTransport({ api: url, fetch: recordingFetch }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: error => errors.push(String(error.message ?? error)),
});

// Waits until the chat made `expected` requests, each answer was read to its end, and the chat is idle
// (the chat sends approval answers by itself, without anything to await).
async function settle(expected) {
  const deadline = Date.now() + 20000;
  const idle = () => chat.status !== 'submitted' && chat.status !== 'streaming';
  while (!(requests.length >= expected && requests.every(r => r.done) && idle())) {
    if (Date.now() > deadline) throw new Error(`no idle chat after ${expected} requests (${requests.length} made)`);
    await new Promise(r => setTimeout(r, 5));
  }
}

const replays = [];
let expected = 0;
for (const step of steps) {
  if (step.send !== undefined) {
    stopOn = step.stopAfter ?? null;
    expected++;
    await chat.sendMessage({ text: step.send, ...(step.files ? { files: step.files } : {}) });
  } else if (step.answer !== undefined) {
    const last = chat.messages[chat.messages.length - 1];
    const waiting = last.parts.filter(p => p.state === 'approval-requested');
    if (waiting.length !== step.answer.length) {
      throw new Error(`expected ${step.answer.length} waiting calls, found ${waiting.length}`);
    }
    expected++; // the chat re-sends once every waiting call has its answer
    for (const [n, part] of waiting.entries()) {
      const answer = step.answer[n];
      await chat.addToolApprovalResponse({
        id: part.approval.id,
        approved: answer === true,
        ...(typeof answer === 'string' ? { reason: answer } : {}),
      });
    }
  } else if (step.regenerate) {
    expected++;
    await chat.regenerate();
  } else if (step.replay !== undefined) {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(requests[step.replay].body),
    });
    replays.push({ status: response.status, body: await response.text() });
  }
  await settle(expected);
}

console.log(JSON.stringify({ messages: chat.messages, errors, status: chat.status, replays,
  requests: requests.map(r => ({ body: r.body, status: r.status, headers: r.headers, chunks: r.chunks, aborted: r.aborted })) }));
