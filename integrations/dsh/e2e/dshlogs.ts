// Writes real dsh session logs for the project's tests: dsh's own agent
// loop, bash tool, local bash executor (@deepseek-ai/dsh-bash-local, no
// sandbox) and JSONL persistence, composed as e2e/compose.ts composes
// them, talk to `dsh-sandbox replay-model`, which plays a fixed
// conversation. Every byte of every log is written by dsh's code; this
// file only picks the conversations and copies the finished files out.
//
// Usage: node e2e/dshlogs.ts OUT_DIR (run by scripts/dsh-logs.sh, which
// builds dsh-sandbox and names it in $DSH_SANDBOX_BIN). It writes:
//   turns.jsonl          two turns: text, reasoning, parallel bash calls,
//                        stdout, stderr, exit codes (JSONL, plain)
//   turns.jsonl.zstd     the same first turn in a zstd-compressed log
//   resumed.jsonl        turns.jsonl's session resumed by a fresh dsh
//                        (agents.resume) for a second turn: no output, a
//                        signal, a timeout
//   forked.jsonl         a fork of the first turn (parentSession,
//                        seedLength) that runs a turn of its own
//   forked.jsonl.zstd    the same fork, zstd
//   subagent.jsonl       a subagent child (origin, delegationDepth 1)
//   preset.jsonl         a session with an agentPreset
//   no-cwd.jsonl         a session created without a cwd
// The sessions run in the fixed workspace /tmp/dsh-sandbox-logs/work (a
// path that means the same on every machine), created and removed here.
// This file is ours; dsh's code is never copied here.

import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { SessionId } from '@deepseek-ai/dsh-session';
import { installModelSelection } from '@deepseek-ai/dsh-agent';
import { createUserMessage } from '@deepseek-ai/dsh-llm';
import { compose, scoped } from './compose.ts';

const WORK = '/tmp/dsh-sandbox-logs/work';

/** One model response of the replay script. */
interface Response {
  content?: string;
  reasoning_content?: string;
  tool_calls?: { id: string; name: 'bash'; arguments: Record<string, unknown> }[];
}

function bash(id: string, command: string, description: string, extra: Record<string, unknown> = {}) {
  return { id, name: 'bash' as const, arguments: { command, description, ...extra } };
}

// The turns, in the order they run; the replay model answers them in
// this order.
const firstTurn: Response[] = [
  {
    reasoning_content: 'The user wants an overview of the workspace. Listing it and reading the notes will do.',
    content: 'I will list the workspace and read a file that may be missing.',
    tool_calls: [bash('call_ls', 'ls', 'List files in the workspace'), bash('call_missing', 'cat missing.txt', 'Read a missing file')],
  },
  { content: 'Now a command that writes to both streams.', tool_calls: [bash('call_mixed', 'echo out; echo err >&2; exit 3', 'Write to stdout and stderr')] },
  { content: 'The workspace holds notes.txt and src/; missing.txt does not exist, and the last command exited 3.' },
];
const secondTurn: Response[] = [
  { content: 'Two quiet commands.', tool_calls: [bash('call_true', 'true', 'Succeed silently'), bash('call_signal', 'kill -TERM $$', 'Stop the shell with a signal')] },
  { content: 'And one that runs too long.', tool_calls: [bash('call_sleep', 'sleep 5', 'Sleep past the timeout', { timeoutMs: 300 })] },
  { content: 'Done: no output, a signal and a timeout.' },
];
const forkTurn: Response[] = [
  { content: 'Reading the file that exists.', tool_calls: [bash('call_notes', 'cat notes.txt', 'Read the notes')] },
  { content: 'The notes say hello.' },
];
const childTurn: Response[] = [
  { reasoning_content: 'Count the lines as asked.', tool_calls: [bash('call_wc', 'wc -l < notes.txt', 'Count the lines of the notes')] },
  { content: 'notes.txt has 2 lines.' },
];
const presetTurn: Response[] = [{ reasoning_content: 'A review needs no command here.', content: 'Nothing to review yet: the workspace has no changes.' }];
const noCwdTurn: Response[] = [{ content: 'Hello! There is no workspace in this session.' }];

const script = { responses: [...firstTurn, ...firstTurn, ...secondTurn, ...forkTurn, ...forkTurn, ...childTurn, ...presetTurn, ...noCwdTurn] };

/** Starts the replay model on script and resolves with its base URL and a stop function. */
async function startReplay(dir: string): Promise<{ baseURL: string; stop: () => void }> {
  const bin = process.env.DSH_SANDBOX_BIN;
  if (bin === undefined || bin === '') throw new Error('DSH_SANDBOX_BIN: required (scripts/dsh-logs.sh sets it)');
  const file = join(dir, 'script.json');
  writeFileSync(file, JSON.stringify(script));
  const child = spawn(bin, ['replay-model', '--script', file], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! });
  const baseURL = await new Promise<string>((resolve, reject) => {
    lines.once('line', resolve);
    child.once('exit', (code) => reject(new Error(`replay-model exited ${code} before listening`)));
  });
  return { baseURL, stop: () => child.kill('SIGTERM') };
}

interface Run {
  root: string;
  compression: 'zstd' | 'none';
}

/** A fresh dsh composition (as a new dsh process would have) over run's store. */
async function dsh(baseURL: string, home: string, run: Run, cwd: string): Promise<any> {
  const ctx = compose({ baseURL, server: 'local', home, cwd, sessionsRoot: run.root, compression: run.compression });
  return scoped(ctx, ['agents', 'sessions', 'agentDefaultModel', 'sessionPersistence', 'shell', 'tools']);
}

function setup(sctx: any) {
  const selection = sctx.get('agentDefaultModel').currentSelection();
  return {
    agentOptions: { provider: selection.provider, model: selection.model },
    setup: (agentCtx: any) => {
      installModelSelection(agentCtx, { current: selection, assembled: undefined });
    },
  };
}

/** Runs one turn of task on agent, flushes its session and returns the stored file's path. */
async function turn(sctx: any, agent: any, task: string): Promise<string> {
  await agent.whenIdle();
  agent.followup(createUserMessage({ content: [{ type: 'text', text: task }], source: { kind: 'user' } }));
  await agent.whenIdle();
  await sctx.get('sessions').flush(agent.session);
  const end = [...agent.session.events].reverse().find((e: any) => e.type === 'turn/end');
  if (end?.data?.reason?.kind !== 'completed') throw new Error(`session ${agent.session.id}: turn ended ${JSON.stringify(end?.data?.reason)}, want completed`);
  return sctx.get('sessionPersistence').locate(agent.session.header).path;
}

async function create(sctx: any, id: string, meta: Record<string, unknown> | undefined, seed?: readonly unknown[]): Promise<any> {
  const { agent } = await sctx.get('agents').create({ sessionId: SessionId(id), ...(meta === undefined ? {} : { meta }), ...(seed === undefined ? {} : { seed }), ...setup(sctx) });
  return agent;
}

async function main(): Promise<void> {
  const out = process.argv[2];
  if (out === undefined || out === '') throw new Error('usage: dshlogs.ts OUT_DIR');
  mkdirSync(out, { recursive: true });
  rmSync(WORK, { recursive: true, force: true });
  mkdirSync(join(WORK, 'src'), { recursive: true });
  writeFileSync(join(WORK, 'notes.txt'), 'hello\nworld\n');
  const dir = mkdtempSync(join(tmpdir(), 'dsh-logs-'));
  const home = join(dir, 'home');
  const plain: Run = { root: join(dir, 'plain'), compression: 'none' };
  const zstd: Run = { root: join(dir, 'zstd'), compression: 'zstd' };
  const replay = await startReplay(dir);
  try {
    const task1 = 'Look around the workspace.';
    let sctx = await dsh(replay.baseURL, home, plain, WORK);
    const a = await create(sctx, 'turns-1', { cwd: WORK });
    copyFileSync(await turn(sctx, a, task1), join(out, 'turns.jsonl'));
    const seed = [...a.session.events];

    const zctx = await dsh(replay.baseURL, home, zstd, WORK);
    const z = await create(zctx, 'turns-zstd-1', { cwd: WORK });
    copyFileSync(await turn(zctx, z, task1), join(out, 'turns.jsonl.zstd'));

    // A fresh dsh resumes the stored session for a second turn.
    sctx = await dsh(replay.baseURL, home, plain, WORK);
    const { agent: resumed } = await sctx.get('agents').resume({ resumeSessionId: SessionId('turns-1'), ...setup(sctx) });
    copyFileSync(await turn(sctx, resumed, 'Now try the quiet and the stopped commands.'), join(out, 'resumed.jsonl'));

    const forkMeta = { cwd: WORK, parentSession: 'turns-1', seedLength: seed.length };
    const f = await create(sctx, 'forked-1', forkMeta, seed);
    copyFileSync(await turn(sctx, f, 'Read the file that exists instead.'), join(out, 'forked.jsonl'));
    const zf = await create(zctx, 'forked-zstd-1', { ...forkMeta, parentSession: 'turns-zstd-1' }, seed);
    copyFileSync(await turn(zctx, zf, 'Read the file that exists instead.'), join(out, 'forked.jsonl.zstd'));

    const child = await create(sctx, 'subagent-1', { cwd: WORK, parentSession: 'turns-1', origin: 'subagent', delegationDepth: 1 });
    copyFileSync(await turn(sctx, child, 'Count the lines of notes.txt.'), join(out, 'subagent.jsonl'));

    const p = await create(sctx, 'preset-1', { cwd: WORK, agentPreset: 'reviewer' });
    copyFileSync(await turn(sctx, p, 'Review the workspace.'), join(out, 'preset.jsonl'));

    const n = await create(sctx, 'no-cwd-1', undefined);
    copyFileSync(await turn(sctx, n, 'Say hello.'), join(out, 'no-cwd.jsonl'));
  } finally {
    replay.stop();
    rmSync(dir, { recursive: true, force: true });
    rmSync('/tmp/dsh-sandbox-logs', { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`dshlogs: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
