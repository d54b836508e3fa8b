// The real dsh agent loop with this project's ctx.shell provider, for the
// full-loop test (integration/dshloop_test.go). It runs dsh's own packages
// (pinned in ../package.json) as e2e/compose.ts composes them, with JSONL
// persistence and SandboxServiceExecutor as the one `ctx.shell` provider.
//
// Usage: node e2e/dshloop.ts CONFIG_JSON, with CONFIG_JSON
//   {"baseURL", "server", "sessionsRoot", "home", "cwd", "sessionId",
//    "task", "compression"?, "policy"?}
// It runs ONE turn of the task in a new session, flushes the session
// (dsh flushes at turn end; the write-behind timer is set far beyond the
// turn so nothing is written earlier), then reads the transcript back
// with a fresh JSONL store and prints one JSON line:
//   {"sessionId", "location", "turnEnd", "toolResults": [text…],
//    "liveHeader", "storedHeader", "storedEvents"}
// and exits 0; on failure it prints the error on stderr and exits 1.
// This file is ours; dsh's code is never copied here.

import { Session, SessionId } from '@deepseek-ai/dsh-session';
import JsonlSessionPersistence from '@deepseek-ai/dsh-session-persistence-jsonl';
import { installModelSelection } from '@deepseek-ai/dsh-agent';
import { createUserMessage } from '@deepseek-ai/dsh-llm';
import { Context } from '@deepseek-ai/cordis';
import { checkConfig, compose, scoped, toolResults } from './compose.ts';

interface LoopConfig {
  baseURL: string;
  server: string;
  sessionsRoot: string;
  home: string;
  cwd: string;
  sessionId: string;
  task: string;
  compression?: 'zstd' | 'none';
  policy?: string;
}

/** The whole run's bound. */
const RUN_TIMEOUT_MS = 120_000;

function parseConfig(arg: string | undefined): LoopConfig {
  if (arg === undefined) throw new Error('usage: dshloop.ts CONFIG_JSON');
  const c = JSON.parse(arg) as LoopConfig;
  checkConfig(c as any, ['sessionsRoot', 'sessionId', 'task']);
  return c;
}

async function runTurn(ctx: Context, c: LoopConfig): Promise<Record<string, unknown>> {
  const sctx = await scoped(ctx, ['agents', 'sessions', 'agentDefaultModel', 'sessionPersistence', 'shell', 'tools']);
  const selection = sctx.get('agentDefaultModel').currentSelection();
  const { agent } = await sctx.get('agents').create({
    sessionId: SessionId(c.sessionId),
    meta: { cwd: c.cwd },
    agentOptions: { provider: selection.provider, model: selection.model },
    setup: (agentCtx: any) => {
      installModelSelection(agentCtx, { current: selection, assembled: undefined });
    },
  });
  await agent.whenIdle();
  agent.followup(createUserMessage({ content: [{ type: 'text', text: c.task }], source: { kind: 'user' } }));
  await agent.whenIdle();
  await sctx.get('sessions').flush(agent.session);
  const events: readonly any[] = agent.session.events;
  const turnEnd = [...events].reverse().find((e) => e.type === 'turn/end')?.data?.reason;
  const location = sctx.get('sessionPersistence').locate(agent.session.header);

  // Read the transcript back the way dsh loads a session: a fresh store
  // finds it by id under the root, and the session restores from it.
  const reader = new Context();
  reader.provide('sessions');
  (reader as any).set('sessions', { list: () => [] });
  const store = new (JsonlSessionPersistence as any)(reader, { root: c.sessionsRoot, compression: c.compression ?? 'zstd' });
  const stored = await store.loadStored(SessionId(c.sessionId));
  if (stored === undefined) throw new Error(`dsh found no stored log of session ${c.sessionId} under ${c.sessionsRoot}`);
  Session.fromRestore(SessionId(c.sessionId), stored.events, stored.meta);
  return {
    sessionId: c.sessionId,
    location,
    turnEnd,
    toolResults: toolResults(events),
    liveHeader: agent.session.header,
    storedHeader: stored.meta,
    storedEvents: stored.events.length,
  };
}

async function main(): Promise<void> {
  const c = parseConfig(process.argv[2]);
  const timer = setTimeout(() => {
    process.stderr.write(`dshloop: no result within ${RUN_TIMEOUT_MS} ms\n`);
    process.exit(3);
  }, RUN_TIMEOUT_MS);
  const out = await runTurn(compose(c), c);
  clearTimeout(timer);
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
}

main().catch((err: unknown) => {
  process.stderr.write(`dshloop: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
