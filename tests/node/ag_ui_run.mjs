// Drives agentloop.ui.ag_ui_app with AG-UI's own client: `HttpAgent` from @ag-ui/client, which parses
// every event against @ag-ui/core's schemas and verifies their order (verifyEvents).
//
//   node ag_ui_run.mjs URL 'STEPS_JSON'
//
// Steps: {"user": text} (adds a user message, runs), {"resume": [true | false | reason, ...]} (answers the
// pending interrupts in order, runs). Prints one JSON object: the messages, per run its events, its error,
// its outcome and the interrupts left pending.
import { HttpAgent } from '@ag-ui/client';

const [url, stepsJson] = process.argv.slice(2);
const steps = JSON.parse(stepsJson);
const agent = new HttpAgent({ url, threadId: 'thread-1' });
const runs = [];
let n = 0;

for (const step of steps) {
  const run = { events: [], error: null };
  runs.push(run);
  const options = { runId: `run-${++n}` };
  if (step.user !== undefined) {
    agent.addMessage({ id: `user-${n}`, role: 'user', content: step.user });
  } else if (step.resume !== undefined) {
    options.resume = agent.pendingInterrupts.map((interrupt, i) => {
      const answer = step.resume[i];
      return {
        interruptId: interrupt.id,
        status: 'resolved',
        payload: { approved: answer === true, ...(typeof answer === 'string' ? { reason: answer } : {}) },
      };
    });
  }
  try {
    const result = await agent.runAgent(options, {
      onEvent: ({ event }) => { run.events.push(event); },
      onRunFailed: ({ error }) => { run.error = String(error.message ?? error); return { stopPropagation: true }; },
    });
    run.result = result.result ?? null;
  } catch (error) {
    run.error = String(error.message ?? error);
  }
  run.pending = agent.pendingInterrupts;
}

console.log(JSON.stringify({ messages: agent.messages, runs }));
