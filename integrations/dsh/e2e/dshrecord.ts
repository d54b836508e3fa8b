// The real dsh agent loop with this project's ctx.shell provider, for the
// request-recording tests (integration/dshrecord_test.go). It composes
// dsh's own packages as e2e/compose.ts does (JSONL or SQLite persistence),
// with a provider that records the trusted dshEnv snapshot dsh hands it
// for every call (and sends to the service unchanged), then runs ONE turn
// of a task in a parent session and, when asked, in child sessions that
// dsh's subagent runtime would create: their headers come from
// @deepseek-ai/dsh-subagent's own childSessionMeta (parentSession,
// origin "subagent", delegationDepth 1) and they are created through
// ctx.agents as its in-process provider does. All turns run concurrently.
// Background jobs the model starts are waited for (a host job controller
// is attached to dsh's job registry) and their output is read. Optionally
// one more call runs with no agent at all, as dsh's shell seam makes it.
//
// Usage: node e2e/dshrecord.ts CONFIG_JSON, with CONFIG_JSON
//   {"baseURL", "server", "home", "cwd", "persistence"?, "sessionsRoot"?,
//    "sqlitePath"?, "sessionId", "children"?: [id…], "task",
//    "noAgentCommand"?}
// It prints one JSON line:
//   {"agents": [{"sessionId", "header", "location", "turnEnd",
//                "toolResults", "jobs": [{"id", "status", "output"}]}…],
//    "calls": [{"background", "sessionId", "dshEnv"}…],
//    "noAgent"?: {"dshEnv", "exitCode", "stdout"}}
// and exits 0; on failure it prints the error on stderr and exits 1.
// This file is ours; dsh's code is never copied here.

import { SessionId } from '@deepseek-ai/dsh-session';
import { installModelSelection } from '@deepseek-ai/dsh-agent';
import { createUserMessage } from '@deepseek-ai/dsh-llm';
import { childSessionMeta, resolveChildAgentOptions, resolveChildDepth } from '@deepseek-ai/dsh-subagent';
import type { ShellExecRequest, ShellExecSpec, ShellProcess } from '@deepseek-ai/dsh-shell';
import { SandboxServiceExecutor } from '../src/index.ts';
import { checkConfig, compose, scoped, toolResults } from './compose.ts';
import type { ComposeConfig } from './compose.ts';

interface RecordConfig extends ComposeConfig {
  sessionId: string;
  children?: string[];
  task: string;
  noAgentCommand?: string;
}

/** One call as the provider got it from dsh. */
interface Recorded {
  background: boolean;
  sessionId: string | null;
  dshEnv: Record<string, string>;
}

/** The whole run's bound. */
const RUN_TIMEOUT_MS = 150_000;
/** How long one background job is waited for after the turn. */
const JOB_WAIT_MS = 60_000;

const recorded: Recorded[] = [];
const specs = new WeakMap<object, Recorded>();

/**
 * The provider, recording each call's trusted dshEnv as dsh resolved it;
 * it sends that snapshot to the service unchanged (the service compares
 * it with its own and refuses a mismatch).
 */
class RecordingExecutor extends SandboxServiceExecutor {
  override resolve(request: ShellExecRequest): ShellExecSpec {
    const spec = super.resolve(request);
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(spec.dshEnv ?? {})) if (typeof v === 'string') env[k] = v;
    const rec: Recorded = { background: false, sessionId: env.DSH_SESSION_ID ?? null, dshEnv: env };
    recorded.push(rec);
    specs.set(spec, rec);
    return spec;
  }

  override start(spec: ShellExecSpec): ShellProcess {
    const rec = specs.get(spec);
    if (rec !== undefined) rec.background = true;
    return super.start(spec);
  }
}

function parseConfig(arg: string | undefined): RecordConfig {
  if (arg === undefined) throw new Error('usage: dshrecord.ts CONFIG_JSON');
  const c = JSON.parse(arg) as RecordConfig;
  checkConfig(c as any, ['sessionId', 'task']);
  if (c.children !== undefined && (!Array.isArray(c.children) || c.children.some((id) => typeof id !== 'string' || id === ''))) throw new Error('config: children: want a list of session ids');
  return c;
}

async function run(c: RecordConfig): Promise<Record<string, unknown>> {
  const ctx = compose(c, RecordingExecutor);
  const sctx = await scoped(ctx, ['agents', 'sessions', 'agentDefaultModel', 'sessionPersistence', 'shell', 'shellEnv', 'jobs', 'tools']);
  // This host's own job controls: dsh's registry starts background jobs
  // only for an owner some controller serves.
  sctx.get('jobs').attachController('dshrecord');
  const agents = sctx.get('agents');
  const selection = sctx.get('agentDefaultModel').currentSelection();
  const setup = (agentCtx: any): void => {
    installModelSelection(agentCtx, { current: selection, assembled: undefined });
  };
  const { agent: parent } = await agents.create({
    sessionId: SessionId(c.sessionId),
    meta: { cwd: c.cwd },
    agentOptions: { provider: selection.provider, model: selection.model },
    setup,
  });
  const all = [parent];
  for (const id of c.children ?? []) {
    const depth = resolveChildDepth(parent, undefined);
    const { agent } = await agents.create({
      sessionId: SessionId(id),
      meta: childSessionMeta(parent, depth, 0),
      agentOptions: resolveChildAgentOptions(parent, {}, depth),
      setup,
    });
    all.push(agent);
  }
  await Promise.all(all.map((a) => a.whenIdle()));
  for (const a of all) a.followup(createUserMessage({ content: [{ type: 'text', text: c.task }], source: { kind: 'user' } }));
  await Promise.all(all.map((a) => a.whenIdle()));

  const jobs = sctx.get('jobs');
  const out: Record<string, unknown>[] = [];
  for (const a of all) {
    const done: Record<string, unknown>[] = [];
    for (const j of jobs.list(a)) {
      const snap = await jobs.wait(j.id, JOB_WAIT_MS, a);
      const read = jobs.read(j.id, a);
      done.push({ id: j.id, status: snap.status, output: read.text });
    }
    await sctx.get('sessions').flush(a.session);
    const events: readonly any[] = a.session.events;
    out.push({
      sessionId: a.session.header.id,
      header: a.session.header,
      location: sctx.get('sessionPersistence').locate(a.session.header) ?? null,
      turnEnd: [...events].reverse().find((e) => e.type === 'turn/end')?.data?.reason,
      toolResults: toolResults(events),
      jobs: done,
    });
  }

  const result: Record<string, unknown> = { agents: out, calls: recorded };
  if (c.noAgentCommand !== undefined) {
    // A call with no agent: dsh's shell-env snapshot of an execution that
    // belongs to no session, through the same ctx.shell seam.
    const shell = sctx.get('shell');
    const dshEnv = sctx.get('shellEnv').collect({});
    const r = await shell.run(shell.resolve({ command: c.noAgentCommand, workdir: c.cwd, dshEnv }));
    result.noAgent = { dshEnv, exitCode: r.exitCode, stdout: r.stdout.text, stderr: r.stderr.text };
  }
  return result;
}

async function main(): Promise<void> {
  const c = parseConfig(process.argv[2]);
  const timer = setTimeout(() => {
    process.stderr.write(`dshrecord: no result within ${RUN_TIMEOUT_MS} ms\n`);
    process.exit(3);
  }, RUN_TIMEOUT_MS);
  const out = await run(c);
  clearTimeout(timer);
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0);
}

main().catch((err: unknown) => {
  process.stderr.write(`dshrecord: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
