// The real dsh agent loop with this project's ctx.shell provider, for the
// full-loop test (integration/dshloop_test.go). It composes the smallest
// set of dsh's own packages (pinned in ../package.json) that runs dsh's
// agent loop: the session store with JSONL persistence, the LLM runtime
// with the DeepSeek adapter (pointed at `dsh-sandbox replay-model`), the
// default model, the system prompt, the tool runtime, dsh's shell-env
// registry, the local job registry, dsh's bash tool and, as the one
// `ctx.shell` provider, SandboxServiceExecutor. No launcher, bundle or
// patch file: the same plugins dsh-base loads, wired by hand.
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

import { Context } from '@deepseek-ai/cordis';
import { Session, SessionId, SessionStore } from '@deepseek-ai/dsh-session';
import JsonlSessionPersistence from '@deepseek-ai/dsh-session-persistence-jsonl';
import AgentRegistry, { installModelSelection } from '@deepseek-ai/dsh-agent';
import AgentLoop from '@deepseek-ai/dsh-agent-loop';
import AgentDefaultModelConfig from '@deepseek-ai/dsh-agent-default-model';
import LlmRuntime, { createUserMessage } from '@deepseek-ai/dsh-llm';
import * as llmDeepSeek from '@deepseek-ai/dsh-llm-deepseek';
import SystemPrompt from '@deepseek-ai/dsh-system-prompt';
import ToolRuntime from '@deepseek-ai/dsh-tools';
import * as shellEnv from '@deepseek-ai/dsh-shell-env';
import LocalJobRegistry from '@deepseek-ai/dsh-jobs-local';
import * as toolBash from '@deepseek-ai/dsh-tool-bash';
import { SandboxServiceExecutor } from '../src/index.ts';

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

/** The DeepSeek adapter's provider route and a model of its catalog. */
const PROVIDER = 'deepseek-official';
const MODEL = 'deepseek-v4-flash';
/** Longer than any turn of the test: only the explicit flush writes. */
const WRITE_BEHIND_MS = 10 * 60 * 1000;
/** The whole run's bound. */
const RUN_TIMEOUT_MS = 120_000;

function parseConfig(arg: string | undefined): LoopConfig {
  if (arg === undefined) throw new Error('usage: dshloop.ts CONFIG_JSON');
  const c = JSON.parse(arg) as LoopConfig;
  for (const k of ['baseURL', 'server', 'sessionsRoot', 'home', 'cwd', 'sessionId', 'task'] as const) {
    if (typeof c[k] !== 'string' || c[k] === '') throw new Error(`config: ${k}: required`);
  }
  return c;
}

function compose(c: LoopConfig): Context {
  const ctx = new Context();
  const plugin = (p: unknown, config?: unknown): void => {
    (ctx as any).plugin(p, config);
  };
  plugin(SessionStore);
  plugin(JsonlSessionPersistence, { root: c.sessionsRoot, compression: c.compression ?? 'zstd', writeBatchMaxDelayMs: WRITE_BEHIND_MS });
  plugin(LlmRuntime);
  plugin(llmDeepSeek, { baseURL: c.baseURL });
  plugin(AgentDefaultModelConfig, { provider: PROVIDER, model: MODEL });
  plugin(SystemPrompt, {});
  plugin(ToolRuntime, {});
  plugin(shellEnv, { dshHome: c.home });
  plugin(LocalJobRegistry, {});
  plugin(SandboxServiceExecutor, { server: c.server, policy: c.policy ?? 'workspace-write', cwd: c.cwd });
  plugin(toolBash, {});
  plugin(AgentRegistry);
  plugin(AgentLoop, {});
  return ctx;
}

/** The text blocks of every tool result of the session, in order. */
function toolResults(events: readonly any[]): string[] {
  const out: string[] = [];
  for (const e of events) {
    if (e.type !== 'tool/result') continue;
    for (const block of e.data?.message?.content ?? []) {
      if (block.type !== 'tool-result') continue;
      out.push((block.content ?? []).filter((b: any) => b.type === 'text').map((b: any) => b.text).join(''));
    }
  }
  return out;
}

async function runTurn(ctx: Context, c: LoopConfig): Promise<Record<string, unknown>> {
  const services = ['agents', 'sessions', 'agentDefaultModel', 'sessionPersistence', 'shell', 'tools'];
  const scoped = await new Promise<any>((resolve) => {
    (ctx as any).inject(services, (sctx: any) => resolve(sctx));
  });
  const selection = scoped.get('agentDefaultModel').currentSelection();
  const { agent } = await scoped.get('agents').create({
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
  await scoped.get('sessions').flush(agent.session);
  const events: readonly any[] = agent.session.events;
  const turnEnd = [...events].reverse().find((e) => e.type === 'turn/end')?.data?.reason;
  const location = scoped.get('sessionPersistence').locate(agent.session.header);

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
