// The chat page of examples/web_chat.py, on the Vercel AI SDK's own chat client (`ai` package): the SDK
// keeps the messages (AbstractChat, what useChat wraps) and talks to agentloop.ui.vercel_ai_app through
// DefaultChatTransport. Built offline into chat.bundle.js by tests/node/build_example.mjs (esbuild).
//
// Everything the model, a tool or an error says is put on the page with textContent, never as HTML.
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';

const $ = selector => document.querySelector(selector);

class State {
  constructor(onChange) { this.onChange = onChange; }
  status = 'ready';
  error = undefined;
  messages = [];
  pushMessage = message => { this.messages = this.messages.concat(message); this.onChange(); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); this.onChange(); };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
    this.onChange();
  };
  snapshot = thing => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor(init) {
    const state = new State(() => render());
    super({ ...init, state });
    this.pageState = state;
  }
  setStatus(options) { super.setStatus(options); render(); }
}

const chat = new Chat({
  transport: new DefaultChatTransport({ api: '/api/chat' }),
  // Once every waiting call of the last message has an answer, the chat sends them by itself.
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: error => showError(error.message),
});

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text; // text, never markup
  return node;
}

function showError(message) {
  const box = $('#error');
  box.textContent = message;
  box.hidden = false;
}

// A tool's progress (its `ctx.report_progress` reports) is the message's `data-tool-progress` part whose id
// is the call's id: each report replaces the one before.
function progressBar(message, toolCallId) {
  const report = message.parts.find(p => p.type === 'data-tool-progress' && p.id === toolCallId);
  if (!report) return null;
  const { progress, total, message: note } = report.data;
  const bar = element('progress', 'tool-progress');
  bar.value = progress;
  if (total != null) bar.max = total;
  const box = element('span', 'tool-progress-box');
  box.append(bar, element('span', 'tool-progress-note', note ?? `${progress}${total != null ? ` / ${total}` : ''}`));
  return box;
}

// Messages typed while an answer was running, steered into it (`POST /api/steer`): shown inside the message
// that was being written, after the parts it had then. The run answers them before it finishes.
const steered = [];
const stopped = new Set(); // the answers Stop cancelled on the server

function toolPart(part, message) {
  const box = element('div', `tool ${part.state}`);
  box.dataset.state = part.state;
  box.append(element('span', 'tool-name', part.toolName), element('code', 'tool-input', JSON.stringify(part.input ?? {})));
  const bar = progressBar(message, part.toolCallId);
  if (bar) box.append(bar);
  if (part.state === 'output-available') box.append(element('span', 'tool-output', `→ ${String(part.output)}`));
  if (part.state === 'output-error') box.append(element('span', 'tool-error', `failed: ${part.errorText}`));
  if (part.state === 'output-denied') box.append(element('span', 'tool-denied', 'denied'));
  if (part.state === 'approval-requested') {
    const approve = element('button', 'approve', 'Approve');
    const deny = element('button', 'deny', 'Deny');
    approve.onclick = () => chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
    deny.onclick = () => chat.addToolApprovalResponse({ id: part.approval.id, approved: false, reason: 'The user said no.' });
    box.append(approve, deny);
  }
  if (part.state === 'approval-responded') box.append(element('span', 'tool-waiting', part.approval.approved ? 'approved…' : 'denied…'));
  return box;
}

function render() {
  const list = $('#messages');
  list.replaceChildren();
  for (const message of chat.messages) {
    const item = element('li', `message ${message.role}`);
    const added = after => {
      for (const note of steered) {
        if (note.messageId === message.id && note.after === after) item.append(element('p', 'steered', note.text));
      }
    };
    added(0);
    message.parts.forEach((part, index) => {
      if (part.type === 'text') item.append(element('p', 'text', part.text));
      else if (part.type === 'reasoning') item.append(element('p', 'reasoning', part.text));
      else if (part.type === 'dynamic-tool' || part.type.startsWith('tool-')) item.append(toolPart(part, message));
      added(index + 1);
    });
    if (stopped.has(message.id)) item.append(element('p', 'stopped', 'Stopped.'));
    list.append(item);
  }
  document.body.dataset.status = chat.status;
  $('#send').textContent = busy() ? 'Add to the answer' : 'Send';
  $('#stop').hidden = !busy();
}

const busy = () => chat.status === 'submitted' || chat.status === 'streaming';

// While an answer runs, a new message goes to that run on the server (agent.steer): no second answer starts.
async function steer(text) {
  const last = chat.messages[chat.messages.length - 1];
  const note = { messageId: last?.id, after: last ? last.parts.length : 0, text };
  const response = await fetch('/api/steer', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: chat.id, text }),
  });
  if (!response.ok) return false; // it ended meanwhile
  steered.push(note);
  render();
  return true;
}

$('#form').addEventListener('submit', event => {
  event.preventDefault();
  const input = $('#question');
  const text = input.value.trim();
  if (!text) return;
  input.value = '';
  $('#error').hidden = true;
  if (busy()) {
    steer(text).then(taken => { if (!taken) chat.sendMessage({ text }); });
  } else {
    chat.sendMessage({ text });
  }
});
// Stop cancels the running answer on the server (agent.cancel): its stream then ends as usual. When nothing
// can be cancelled there (409), the page drops its request instead, which stops the run too.
async function stop() {
  const last = chat.messages[chat.messages.length - 1];
  const response = await fetch('/api/stop', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: chat.id }),
  });
  if (!response.ok) return chat.stop();
  if (last?.role === 'assistant') stopped.add(last.id);
  render();
}

$('#stop').addEventListener('click', stop);
render();
