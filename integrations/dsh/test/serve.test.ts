// End to end: the provider against the real `dsh-sandbox serve` on a Unix
// socket (built from this repository, or $DSH_SANDBOX_BIN), running real
// containers. Needs root and runc; it skips with a message saying so,
// except under CI=true, where it fails instead.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Context } from '@deepseek-ai/cordis';
import { SANDBOX_UNAVAILABLE } from '@deepseek-ai/dsh-sandbox';
import { SandboxServiceExecutor } from '../src/index.ts';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function missing(): string[] {
  const out: string[] = [];
  if (process.getuid?.() !== 0) out.push('root');
  if (spawnSync('runc', ['--version']).status !== 0) out.push('runc');
  return out;
}

const lacking = missing();
if (lacking.length > 0 && process.env.CI === 'true') throw new Error(`missing in CI: ${lacking.join(', ')} (scripts/setup.sh installs them)`);
const skip = lacking.length > 0 ? `needs ${lacking.join(', ')}; run scripts/setup.sh as root` : false;

let dir = '';
let serve: ChildProcess | undefined;
let socket = '';
/** The transcript dsh would compute for the session (`dsh-sandbox locate`, checked against dsh's own Locate in interop/dsh). */
let transcript = '';
const ws = () => join(dir, 'work space');

before(async () => {
  if (skip !== false) return;
  dir = mkdtempSync(join(tmpdir(), 'dsh-provider-e2e-'));
  // Calls run in user namespaces: their mapped root must search the
  // state directory's parents (mkdtemp makes them 0700).
  chmodSync(dir, 0o711);
  mkdirSync(ws());
  let bin = process.env.DSH_SANDBOX_BIN ?? '';
  if (bin === '') {
    bin = join(dir, 'dsh-sandbox');
    const go = existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go';
    const b = spawnSync(go, ['build', '-o', bin, './cmd/dsh-sandbox'], { cwd: repo, stdio: ['ignore', 'inherit', 'inherit'] });
    if (b.status !== 0) throw new Error(`building dsh-sandbox failed (exit ${b.status})`);
    // runc and crun calls run dsh-sandbox-stub as pid 1: it is found next to the executable.
    const s = spawnSync(go, ['build', '-o', join(dir, 'dsh-sandbox-stub'), './cmd/dsh-sandbox-stub'], {
      cwd: repo, stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, CGO_ENABLED: '0' },
    });
    if (s.status !== 0) throw new Error(`building dsh-sandbox-stub failed (exit ${s.status})`);
  }
  const where = spawnSync(bin, ['locate', '--home', join(dir, 'home'), '--compression', 'none', '--cwd', ws(), '--session-id', 'e2e-1'], { encoding: 'utf8' });
  if (where.status !== 0) throw new Error(`dsh-sandbox locate failed: ${where.stderr}`);
  transcript = JSON.parse(where.stdout).path;
  socket = join(dir, 'run', 'sandbox.sock');
  // A policy whose network is an allowlist: a call that tries another host is denied.
  const egress = join(dir, 'egress.yaml');
  writeFileSync(egress, 'name: egress\nimage: host\nnetwork: {mode: allowlist, allow: [api.example.com]}\n');
  serve = spawn(bin, ['serve', '--home', join(dir, 'home'), '--state-dir', join(dir, 'state'), '--data-dir', join(dir, 'data'),
    '--compression', 'none', '--listen', `unix://${socket}`, '--policy-file', egress], {
    // Stale facts in the service's own environment must never reach a call.
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', DSH_STALE_SENTINEL: '1', DSH_SESSION_ID: 'wrong' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const exited = new Promise<never>((_, reject) => serve?.once('exit', (code) => reject(new Error(`dsh-sandbox serve exited with ${code} before listening`))));
  while (!existsSync(socket)) await Promise.race([new Promise((r) => setTimeout(r, 20)), exited]);
});

after(async () => {
  if (serve !== undefined && serve.exitCode === null) {
    const gone = new Promise((r) => serve?.once('exit', r));
    serve.kill('SIGTERM');
    await gone;
  }
  if (dir !== '') rmSync(dir, { recursive: true, force: true });
});

const header = () => ({ version: 0, id: 'e2e-1', createdAt: 1700000000000, cwd: ws() });

function executor(policy?: string): SandboxServiceExecutor {
  const ctx = new Context();
  ctx.provide('agents');
  ctx.set('agents', { get: (id: string) => (id === 'e2e-1' ? { session: { header: header() } } : undefined) });
  return new SandboxServiceExecutor(ctx as any, { server: `unix://${socket}`, cwd: ws(), pollMs: 20, ...(policy === undefined ? {} : { policy }) });
}

const dshEnv = () => ({ DSH_HOME: join(dir, 'home'), DSH_SHELL: '1', DSH_SESSION_ID: 'e2e-1', DSH_SESSION_JSONL: transcript }) as const;

test('foreground call runs in a container with the current facts', { skip }, async () => {
  const ex = executor();
  const r = await ex.run(ex.resolve({
    command: 'echo "id=$DSH_SESSION_ID"; echo "jsonl=$DSH_SESSION_JSONL"; echo "stale=${DSH_STALE_SENTINEL:-absent}"; echo "pwd=$PWD"; hostname; echo err >&2; exit 3',
    dshEnv: dshEnv(),
  }));
  assert.equal(r.exitCode, 3);
  assert.equal(r.signal, null);
  assert.equal(r.stderr.text, 'err\n');
  const lines = r.stdout.text.trim().split('\n');
  assert.equal(lines[0], 'id=e2e-1');
  assert.equal(lines[1], `jsonl=${transcript}`);
  assert.ok(transcript.startsWith(`${join(dir, 'home', 'sessions')}/`) && transcript.endsWith('/e2e-1/session.jsonl'), transcript);
  assert.equal(lines[2], 'stale=absent');
  assert.equal(lines[3], `pwd=${ws()}`);
  assert.notEqual(lines[4], hostname(), 'the command ran in its own container (hostname)');
});

test('background job: output, kill', { skip }, async () => {
  const ex = executor();
  const proc = ex.start(ex.resolve({ command: 'echo started; exec sleep 300', dshEnv: dshEnv() }));
  let out = '';
  while (!out.includes('started') && proc.status === 'running') {
    out += proc.readOutput().delta;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(out, 'started\n');
  assert.equal(proc.kill(), true);
  await proc.done;
  assert.equal(proc.status, 'killed');
  assert.equal(proc.exitCode, null);
  assert.ok(proc.signal === 'SIGTERM' || proc.signal === 'SIGKILL', `signal ${proc.signal}`);
});

test('a tampered DSH_SESSION_JSONL is refused by the service and nothing runs', { skip }, async () => {
  const ex = executor();
  const marker = join(ws(), 'tampered-ran');
  const other = join(dir, 'home', 'sessions', '--elsewhere--', 'victim', 'session.jsonl');
  await assert.rejects(
    ex.run(ex.resolve({ command: `touch '${marker}'`, dshEnv: { ...dshEnv(), DSH_SESSION_JSONL: other } })),
    (err: any) => err.code === SANDBOX_UNAVAILABLE && err.message.includes('403') && err.message.includes('dshEnv.DSH_SESSION_JSONL'),
  );
  assert.equal(existsSync(marker), false, 'the refused call ran nothing');
  const r = await ex.run(ex.resolve({ command: `touch '${marker}' && echo ran`, dshEnv: dshEnv() }));
  assert.equal(r.stdout.text, 'ran\n', 'the same call with dsh\'s own snapshot runs');
});

test('a connection the allowlist denies ends stderr with a note naming the host', { skip }, async () => {
  const note = '[network: the sandbox denied connections to denied.invalid:80; a policy decision, not a network fault]\n';
  const ex = executor('egress');
  const r = await ex.run(ex.resolve({ command: 'curl -sSf -m 10 http://denied.invalid/', dshEnv: dshEnv() }));
  assert.notEqual(r.exitCode, 0, 'curl failed');
  assert.ok(r.stderr.text.endsWith(note), `stderr ${JSON.stringify(r.stderr.text)} should end with the note`);
  // The legitimate variant: a call that tries no host has no note.
  const ok = await ex.run(ex.resolve({ command: 'echo quiet', dshEnv: dshEnv() }));
  assert.equal(ok.stdout.text, 'quiet\n');
  assert.equal(ok.stderr.text, '');
});
