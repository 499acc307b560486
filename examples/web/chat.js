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

// Run control. Stop asks the server to cancel the chat's running reply (POST /api/stop: `agent.cancel`);
// the replies it stopped are marked. A message sent while a reply runs is steered into it: the server's
// chat app (if_busy="steer") hands it to the running reply, which answers it too. The SDK's chat keeps
// only its own request's messages, so the page keeps the steered ones, each shown where it was sent: after
// the parts of the reply that were on the page by then.
const stopped = new Set(); // ids of the assistant messages stopped
const steered = []; // {messageId, atPart, text}

const busy = () => chat.status === 'submitted' || chat.status === 'streaming';

async function stop() {
  const last = chat.messages.at(-1);
  const response = await fetch('/api/stop', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: chat.id }),
  });
  const { stopped: done } = response.ok ? await response.json() : { stopped: false };
  if (done && last?.role === 'assistant') stopped.add(last.id);
  if (!done) await chat.stop(); // nothing to cancel by id (no server memory): drop the request instead
  render();
}

async function steer(text) {
  const last = chat.messages.at(-1);
  steered.push({ messageId: last.id, atPart: last.role === 'assistant' ? last.parts.length : Infinity, text });
  render();
  const message = { id: crypto.randomUUID(), role: 'user', parts: [{ type: 'text', text }] };
  const response = await fetch('/api/chat', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: chat.id, messages: [message], trigger: 'submit-message' }),
  });
  await response.text(); // it ends with the reply it joined; that reply shows the answer
}

function render() {
  const list = $('#messages');
  list.replaceChildren();
  for (const message of chat.messages) {
    let item = element('li', `message ${message.role}`);
    const steeredHere = at => steered.filter(s => s.messageId === message.id && s.atPart === at);
    const putSteered = entries => {
      if (entries.length === 0) return;
      if (item.childNodes.length) list.append(item);
      for (const entry of entries) {
        const bubble = element('li', 'message user steered');
        bubble.append(element('p', 'text', entry.text), element('span', 'note', 'sent while the reply ran'));
        list.append(bubble);
      }
      item = element('li', `message ${message.role}`);
    };
    message.parts.forEach((part, index) => {
      putSteered(steeredHere(index));
      if (part.type === 'text') item.append(element('p', 'text', part.text));
      else if (part.type === 'reasoning') item.append(element('p', 'reasoning', part.text));
      else if (part.type === 'dynamic-tool' || part.type.startsWith('tool-')) item.append(toolPart(part, message));
    });
    if (stopped.has(message.id)) item.append(element('p', 'stopped', 'Stopped.'));
    if (item.childNodes.length || message.parts.length === 0) list.append(item);
    putSteered(steered.filter(s => s.messageId === message.id && s.atPart >= message.parts.length));
  }
  document.body.dataset.status = chat.status;
  $('#stop').hidden = !busy();
}

$('#form').addEventListener('submit', event => {
  event.preventDefault();
  const input = $('#question');
  const text = input.value.trim();
  if (!text) return;
  input.value = '';
  if (busy()) { steer(text); return; } // the reply still runs: hand it this message
  $('#error').hidden = true;
  chat.sendMessage({ text });
});
$('#stop').addEventListener('click', stop);
render();
