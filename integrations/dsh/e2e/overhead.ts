// Per-call overhead of the provider: the median wall time of one `true`
// through (a) dsh's own ctx.shell provider @deepseek-ai/dsh-bash-local (no
// sandbox, the baseline), (b) this provider against a real `dsh-sandbox
// serve` (one container per call), and (c) the same request sent straight
// to the service (POST /v1/run, no dsh seam), in one process on one
// machine, rounds interleaved so that drift hits all three alike. It is a
// measurement, not a test: it asserts nothing about time.
//
// Usage (as root, with runc): node e2e/overhead.ts [CALLS]   (default 60)
// It builds dsh-sandbox from this repository unless $DSH_SANDBOX_BIN names
// one, starts `serve` on a private socket and stops it at the end.

import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Context } from '@deepseek-ai/cordis';
import BashLocal from '@deepseek-ai/dsh-bash-local';
import SubprocessLocal from '@deepseek-ai/dsh-subprocess-local';
import { SandboxServiceExecutor } from '../src/index.ts';
import { call, parseServer } from '../src/client.ts';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const calls = Number(process.argv[2] ?? 60);
if (!Number.isInteger(calls) || calls < 1) throw new Error(`calls: want a positive integer, got ${process.argv[2]}`);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function shellOf(ctx: Context): Promise<any> {
  return new Promise((res) => {
    (ctx as any).inject(['shell'], (c: any) => res(c.get('shell')));
  });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'dsh-overhead-'));
  // Calls run in user namespaces: their mapped root must search the
  // state directory's parents (mkdtemp makes them 0700).
  chmodSync(dir, 0o711);
  const ws = join(dir, 'work');
  mkdirSync(ws);
  let bin = process.env.DSH_SANDBOX_BIN ?? '';
  if (bin === '') {
    bin = join(dir, 'dsh-sandbox');
    const go = existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go';
    if (spawnSync(go, ['build', '-o', bin, './cmd/dsh-sandbox'], { cwd: repo, stdio: 'inherit' }).status !== 0) throw new Error('building dsh-sandbox failed');
    // runc and crun calls run dsh-sandbox-stub (found next to the executable) as pid 1.
    const stub = spawnSync(go, ['build', '-o', join(dir, 'dsh-sandbox-stub'), './cmd/dsh-sandbox-stub'], { cwd: repo, stdio: 'inherit', env: { ...process.env, CGO_ENABLED: '0' } });
    if (stub.status !== 0) throw new Error('building dsh-sandbox-stub failed');
  }
  const home = join(dir, 'home');
  const flags = ['--home', home, '--state-dir', join(dir, 'state'), '--data-dir', join(dir, 'data')];
  const id = 'overhead-1';
  const where = spawnSync(bin, ['locate', ...flags, '--cwd', ws, '--session-id', id], { encoding: 'utf8' });
  if (where.status !== 0) throw new Error(`locate: ${where.stderr}`);
  const transcript: string = JSON.parse(where.stdout).path;
  const socket = join(dir, 'run', 'sandbox.sock');
  const serve = spawn(bin, ['serve', ...flags, '--audit-log', 'none', '--listen', `unix://${socket}`], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, stdio: ['ignore', 'ignore', 'inherit'] });
  try {
    while (!existsSync(socket)) await new Promise((r) => setTimeout(r, 20));
    const header = { version: 0, id, createdAt: 1700000000000, cwd: ws };
    const dshEnv = { DSH_HOME: home, DSH_SHELL: '1', DSH_SESSION_ID: id, DSH_SESSION_JSONL: transcript };

    const local = new Context();
    (local as any).plugin(SubprocessLocal, {});
    (local as any).plugin(BashLocal, { cwd: ws });
    const bashLocal = await shellOf(local);

    const sandboxed = new Context();
    sandboxed.provide('agents');
    (sandboxed as any).set('agents', { get: (sid: string) => (sid === id ? { session: { header } } : undefined) });
    (sandboxed as any).plugin(SandboxServiceExecutor, { server: `unix://${socket}`, cwd: ws });
    const provider = await shellOf(sandboxed);

    const ep = parseServer(`unix://${socket}`);
    const body = { policy: 'workspace-write', command: 'true', workdir: ws, timeoutMs: 120000, session: { type: 'session', ...header }, dshEnv };

    const methods: [string, () => Promise<unknown>][] = [
      ['dsh-bash-local (no sandbox)', () => bashLocal.run(bashLocal.resolve({ command: 'true', dshEnv }))],
      ['provider -> serve (oci/runc)', () => provider.run(provider.resolve({ command: 'true', dshEnv }))],
      ['direct POST /v1/run', () => call(ep, 'POST', '/v1/run', body)],
    ];
    const times = new Map<string, number[]>(methods.map(([n]) => [n, []]));
    for (const [, f] of methods) await f(); // warm-up, not counted
    for (let i = 0; i < calls; i++) {
      for (const [n, f] of methods) {
        const t0 = process.hrtime.bigint();
        const r: any = await f();
        const ms = Number(process.hrtime.bigint() - t0) / 1e6;
        if (r?.exitCode !== undefined && r.exitCode !== 0) throw new Error(`${n}: exit ${r.exitCode}`);
        if (r?.result !== undefined && r.result.exitCode !== 0) throw new Error(`${n}: exit ${r.result.exitCode}`);
        times.get(n)?.push(ms);
      }
    }
    const med = new Map([...times].map(([n, xs]) => [n, median(xs)]));
    const [local0, prov, direct] = methods.map(([n]) => med.get(n) ?? NaN);
    for (const [n] of methods) process.stdout.write(`${n.padEnd(30)} median ${(med.get(n) ?? NaN).toFixed(2)} ms over ${calls} calls\n`);
    process.stdout.write(`provider - direct serve call: ${(prov - direct).toFixed(2)} ms (${(prov / direct).toFixed(2)}x)\n`);
    process.stdout.write(`provider - dsh-bash-local:    ${(prov - local0).toFixed(2)} ms (${(prov / local0).toFixed(1)}x)\n`);
  } finally {
    const gone = new Promise((r) => serve.once('exit', r));
    serve.kill('SIGTERM');
    await gone;
    rmSync(dir, { recursive: true, force: true });
  }
  process.exit(0);
}

main().catch((err: unknown) => {
  process.stderr.write(`overhead: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
