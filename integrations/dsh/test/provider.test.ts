// Tests of the ctx.shell provider against a fake `dsh-sandbox serve` on a
// Unix socket that speaks the service's wire (api/openapi.yaml) and
// records every request. The real service is exercised by the Go
// integration tests; here the mapping to dsh's seam is checked.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Context } from '@deepseek-ai/cordis';
import { SANDBOX_UNAVAILABLE } from '@deepseek-ai/dsh-sandbox';
import { SandboxServiceExecutor, denialNote, runResult } from '../src/index.ts';

interface Recorded {
  method: string;
  url: string;
  body: any;
}

interface Fake {
  socket: string;
  requests: Recorded[];
  closedRuns: number;
  server: Server;
  jobs: Map<string, { reads: any[]; killed: boolean }>;
}

type Handler = (req: IncomingMessage, res: ServerResponse, body: any, fake: Fake) => void;

async function fakeService(t: any, handler: Handler): Promise<Fake> {
  const dir = mkdtempSync(join(tmpdir(), 'dsh-provider-'));
  const fake: Fake = { socket: join(dir, 'sandbox.sock'), requests: [], closedRuns: 0, server: undefined as any, jobs: new Map() };
  fake.server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const body = text === '' ? undefined : JSON.parse(text);
      fake.requests.push({ method: req.method ?? '', url: req.url ?? '', body });
      handler(req, res, body, fake);
    });
  });
  await new Promise<void>((resolve) => fake.server.listen(fake.socket, resolve));
  t.after(() => {
    fake.server.closeAllConnections();
    fake.server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return fake;
}

function json(res: ServerResponse, status: number, v: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(v));
}

function event(res: ServerResponse, ev: unknown): void {
  res.write(JSON.stringify(ev) + '\n');
}

const b64 = (s: string): string => Buffer.from(s, 'utf8').toString('base64');

const header = { version: 0, id: 's1', createdAt: 1700000000000, cwd: '/srv/proj', parentSession: 'p0', origin: 'subagent', delegationDepth: 1 };

function executor(fake: { socket: string }, extra: Record<string, unknown> = {}): SandboxServiceExecutor {
  const ctx = new Context();
  ctx.provide('agents');
  ctx.set('agents', { get: (id: string) => (id === 's1' ? { session: { header } } : undefined) });
  return new SandboxServiceExecutor(ctx as any, { server: `unix://${fake.socket}`, policy: 'workspace-write', cwd: '/srv/proj', pollMs: 5, ...extra });
}

const dshEnv = { DSH_HOME: '/h', DSH_SHELL: '1', DSH_SESSION_ID: 's1', DSH_SESSION_JSONL: '/h/sessions/--srv-proj--/s1/session.jsonl.zstd' } as const;

test('foreground run maps the service result and sends the session header', async (t) => {
  const fake = await fakeService(t, (req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
    event(res, { type: 'stdout', data: b64('hi\n') });
    event(res, {
      type: 'result',
      result: {
        exitCode: 3, timedOut: false, aborted: false, timeoutMs: 5000,
        stdout: { text: 'hi\n', truncated: true, spillPath: '/h/sessions/--srv-proj--/s1/spill/c.stdout', spillInside: true, droppedBytes: 10 },
        stderr: { text: 'oops\n', truncated: true, spillPath: '/run/dsh-sandbox/spill/c.stderr', spillInside: false },
      },
    });
    res.end();
  });
  const ex = executor(fake);
  const spec = ex.resolve({ command: 'echo hi; exit 3', timeoutMs: 5000, dshEnv, env: { GOFLAGS: '-mod=mod', DSH_SESSION_ID: 'forged' } });
  const r = await ex.run(spec);
  assert.equal(r.exitCode, 3);
  assert.equal(r.signal, null);
  assert.equal(r.timedOut, false);
  assert.equal(r.aborted, false);
  assert.equal(r.timeoutMs, 5000);
  assert.deepEqual(r.stdout, { text: 'hi\n', truncated: true, spillPath: '/h/sessions/--srv-proj--/s1/spill/c.stdout' });
  assert.deepEqual(r.stderr, { text: 'oops\n', truncated: true }, 'a spill file outside the sandbox is not offered to the model');

  assert.equal(fake.requests.length, 1);
  const { method, url, body } = fake.requests[0];
  assert.equal(`${method} ${url}`, 'POST /v1/run');
  assert.equal(body.stream, true);
  assert.equal(body.policy, 'workspace-write');
  assert.equal(body.command, 'echo hi; exit 3');
  assert.equal(body.workdir, '/srv/proj');
  assert.equal(body.timeoutMs, 5000);
  assert.deepEqual(body.session, { type: 'session', ...header });
  assert.equal(body.cwd, undefined, 'a call of a session takes its cwd from the header');
  assert.deepEqual(body.env, ['GOFLAGS=-mod=mod'], 'a DSH_* entry of ordinary env is never sent');
  assert.deepEqual(body.dshEnv, dshEnv, 'dsh\'s snapshot goes to the service, which compares it with its own');
  assert.equal(body.stdin, undefined);
});

test('a call with no agent sends its directory and no header', async (t) => {
  const fake = await fakeService(t, (req, res) => {
    res.writeHead(200);
    event(res, { type: 'result', result: { exitCode: 0, stdout: { text: '' }, stderr: { text: '' } } });
    res.end();
  });
  const ex = executor(fake);
  const r = await ex.run(ex.resolve({ command: 'ls', workdir: '/srv/other', dshEnv: { DSH_HOME: '/h', DSH_SHELL: '1' } }));
  assert.equal(r.exitCode, 0);
  const body = fake.requests[0].body;
  assert.equal(body.session, undefined);
  assert.equal(body.cwd, '/srv/other');
  assert.equal(body.timeoutMs, 120000, 'the default timeout');
  assert.deepEqual(body.dshEnv, { DSH_HOME: '/h', DSH_SHELL: '1' });
});

test('a snapshot the service refuses fails closed and names the field', async (t) => {
  const fake = await fakeService(t, (req, res, body) => {
    if (body?.dshEnv?.DSH_SESSION_JSONL !== dshEnv.DSH_SESSION_JSONL) {
      json(res, 403, { error: { class: 'forbidden', field: 'dshEnv.DSH_SESSION_JSONL', message: "differs from the service's own value" } });
      return;
    }
    res.writeHead(200);
    event(res, { type: 'result', result: { exitCode: 0, stdout: { text: 'ran' }, stderr: { text: '' } } });
    res.end();
  });
  const ex = executor(fake);
  const tampered = { ...dshEnv, DSH_SESSION_JSONL: '/h/sessions/--srv-proj--/other/session.jsonl.zstd' };
  await assert.rejects(ex.run(ex.resolve({ command: 'id', dshEnv: tampered })), (err: any) => err.code === SANDBOX_UNAVAILABLE && err.message.includes('dshEnv.DSH_SESSION_JSONL') && err.message.includes('403'));
  const proc = ex.start(ex.resolve({ command: 'id', dshEnv: tampered }));
  await proc.done;
  assert.equal(proc.status, 'killed', 'a refused background job never runs');
  assert.match(proc.readOutput().delta, /dshEnv\.DSH_SESSION_JSONL/);
  // The legitimate snapshot runs.
  assert.equal((await ex.run(ex.resolve({ command: 'id', dshEnv }))).stdout.text, 'ran');
});

test('resolve clamps the timeout and fills the defaults', async (t) => {
  const fake = await fakeService(t, (req, res) => json(res, 500, {}));
  const ex = executor(fake, { maxTimeoutMs: 1000 });
  const spec = ex.resolve({ command: 'x', timeoutMs: 999999 });
  assert.equal(spec.timeoutMs, 1000);
  assert.equal(spec.workdir, '/srv/proj');
  assert.equal(spec.stdoutMaxBytes, 64000);
  assert.equal(ex.resolve({ command: 'x', timeoutMs: 10 }).timeoutMs, 10);
});

test('fails closed: unreachable service, refusal, unknown session, stream without result', async (t) => {
  const gone = executor({ socket: join(tmpdir(), 'no-such-dir-dsh-sandbox', 'sandbox.sock') });
  await assert.rejects(gone.run(gone.resolve({ command: 'id', dshEnv })), (err: any) => err.code === SANDBOX_UNAVAILABLE && /unreachable/.test(err.message));

  const refusing = await fakeService(t, (req, res) => json(res, 403, { error: { class: 'forbidden', field: 'session.cwd', message: 'outside the workspace roots' } }));
  const ex = executor(refusing);
  await assert.rejects(ex.run(ex.resolve({ command: 'id', dshEnv })), (err: any) => err.code === SANDBOX_UNAVAILABLE && err.message.includes('session.cwd') && err.message.includes('403'));

  const before = refusing.requests.length;
  await assert.rejects(ex.run(ex.resolve({ command: 'id', dshEnv: { ...dshEnv, DSH_SESSION_ID: 'unknown' } })), (err: any) => err.code === SANDBOX_UNAVAILABLE && err.message.includes('"unknown"'));
  assert.equal(refusing.requests.length, before, 'nothing is sent for an unknown session');

  const mute = await fakeService(t, (req, res) => {
    res.writeHead(200);
    event(res, { type: 'stdout', data: b64('partial') });
    res.end();
  });
  const ex2 = executor(mute);
  await assert.rejects(ex2.run(ex2.resolve({ command: 'id', dshEnv })), (err: any) => err.code === SANDBOX_UNAVAILABLE && /without a result/.test(err.message));

  const erring = await fakeService(t, (req, res) => {
    res.writeHead(200);
    event(res, { type: 'error', error: { class: 'unavailable', message: 'runtime runc failed' } });
    res.end();
  });
  const ex3 = executor(erring);
  await assert.rejects(ex3.run(ex3.resolve({ command: 'id', dshEnv })), (err: any) => err.code === SANDBOX_UNAVAILABLE && /runtime runc failed/.test(err.message));

  // The legitimate variant through the same kind of service works.
  const ok = await fakeService(t, (req, res) => {
    res.writeHead(200);
    event(res, { type: 'result', result: { exitCode: 0, stdout: { text: 'ok' }, stderr: { text: '' } } });
    res.end();
  });
  const ex4 = executor(ok);
  assert.equal((await ex4.run(ex4.resolve({ command: 'id', dshEnv }))).stdout.text, 'ok');
});

test('an abort closes the stream and resolves as aborted', async (t) => {
  let closed!: () => void;
  const sawClose = new Promise<void>((resolve) => {
    closed = resolve;
  });
  const fake = await fakeService(t, (req, res) => {
    res.writeHead(200);
    event(res, { type: 'stdout', data: b64('started\n') });
    res.on('close', () => closed());
  });
  const ex = executor(fake);
  const ac = new AbortController();
  const pending = ex.run(ex.resolve({ command: 'sleep 100', dshEnv, signal: ac.signal }));
  while (fake.requests.length === 0) await new Promise((r) => setTimeout(r, 5));
  await new Promise((r) => setTimeout(r, 20));
  ac.abort();
  const r = await pending;
  await sawClose;
  assert.equal(r.aborted, true);
  assert.equal(r.timedOut, false);
  assert.equal(r.exitCode, null);
  assert.equal(r.stdout.text, 'started\n');

  const pre = new AbortController();
  pre.abort();
  const n = fake.requests.length;
  await assert.rejects(ex.run(ex.resolve({ command: 'id', dshEnv, signal: pre.signal })), /aborted/);
  assert.equal(fake.requests.length, n, 'a pre-aborted call sends nothing');
});

test('background: incremental reads, kill, settle', async (t) => {
  const fake = await fakeService(t, (req, res, body, f) => {
    const url = new URL(req.url ?? '', 'http://x');
    if (req.method === 'POST' && url.pathname === '/v1/jobs') {
      f.jobs.set('bash-00000000000000aa', {
        killed: false,
        reads: [
          { stdout: 'one\n', stderr: '', done: false },
          { stdout: '', stderr: 'warn\n', done: false },
          { stdout: 'two', stderr: '', stdoutDropped: 5, done: false },
        ],
      });
      json(res, 200, { id: 'bash-00000000000000aa' });
      return;
    }
    const m = /^\/v1\/jobs\/([^/]+)(\/kill)?$/.exec(url.pathname);
    const job = m === null ? undefined : f.jobs.get(decodeURIComponent(m[1]));
    if (job === undefined || url.searchParams.get('session') !== 's1') {
      json(res, 404, { error: { class: 'not_found', message: 'no such job' } });
      return;
    }
    if (m?.[2] === '/kill') {
      job.killed = true;
      json(res, 200, { id: m[1] });
      return;
    }
    if (job.reads.length > 0) {
      json(res, 200, { id: m?.[1], ...job.reads.shift() });
      return;
    }
    if (job.killed) {
      json(res, 200, { id: m?.[1], stdout: '', stderr: '', done: true, result: { exitCode: null, signal: 'SIGTERM', aborted: true, stdout: { text: '' }, stderr: { text: '', truncated: true, spillPath: '/h/sessions/--srv-proj--/s1/spill/j.stderr', spillInside: true } } });
      return;
    }
    json(res, 200, { id: m?.[1], stdout: '', stderr: '', done: false });
  });
  const ex = executor(fake);
  const proc = ex.start(ex.resolve({ command: 'long', dshEnv }));
  assert.equal(proc.status, 'running');

  let all = '';
  let lossy = false;
  while (!all.includes('two')) {
    const r = proc.readOutput();
    all += r.delta;
    lossy ||= r.lossy;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.equal(all, 'one\n[stderr]\nwarn\ntwo');
  assert.equal(lossy, true, 'dropped bytes make a read lossy');
  assert.deepEqual(proc.readOutput(), { delta: '', lossy: false }, 'reads never re-deliver');

  assert.equal(proc.kill(), true);
  await proc.done;
  assert.equal(proc.status, 'killed');
  assert.equal(proc.exitCode, null);
  assert.equal(proc.signal, 'SIGTERM');
  assert.equal(proc.kill(), false, 'killing a finished job is a no-op');

  const start = fake.requests.find((r) => r.method === 'POST' && r.url === '/v1/jobs');
  assert.equal(start?.body.command, 'long');
  assert.equal(start?.body.stream, undefined);
  assert.deepEqual(start?.body.session, { type: 'session', ...header });
  assert.deepEqual(start?.body.dshEnv, dshEnv);
  assert.ok(fake.requests.some((r) => r.method === 'POST' && r.url === '/v1/jobs/bash-00000000000000aa/kill?session=s1'));
});

test('background: a job stopped by its deadline is killed and says timed out, never completed', async (t) => {
  const outcomes: Record<string, any> = {
    'bash-00000000000000bb': { exitCode: null, signal: 'SIGTERM', timedOut: true, timeoutMs: 2000, stdout: { text: '' }, stderr: { text: '' } },
    'bash-00000000000000cc': { exitCode: 0, signal: '', timedOut: false, timeoutMs: 0, stdout: { text: 'ok\n' }, stderr: { text: '' } },
  };
  const ids = Object.keys(outcomes);
  const fake = await fakeService(t, (req, res) => {
    const url = new URL(req.url ?? '', 'http://x');
    if (req.method === 'POST' && url.pathname === '/v1/jobs') {
      json(res, 200, { id: ids.shift() });
      return;
    }
    const id = decodeURIComponent(url.pathname.split('/')[3] ?? '');
    json(res, 200, { id, stdout: '', stderr: '', done: true, result: outcomes[id] });
  });
  const ex = executor(fake);
  const timedOut = ex.start(ex.resolve({ command: 'sleep 30', dshEnv }));
  await timedOut.done;
  assert.equal(timedOut.status, 'killed', 'a timed-out job is not completed');
  assert.equal(timedOut.signal, 'SIGTERM');
  assert.equal(timedOut.exitCode, null);
  assert.match(timedOut.readOutput().delta, /\[timed out after 2000ms\]/);
  const ok = ex.start(ex.resolve({ command: 'echo ok', dshEnv }));
  await ok.done;
  assert.equal(ok.status, 'completed', 'a job that exited is completed');
  assert.equal(ok.exitCode, 0);
});

test('background fails closed when the service is unreachable', async () => {
  const ex = executor({ socket: join(tmpdir(), 'no-such-dir-dsh-sandbox', 'sandbox.sock') });
  const proc = ex.start(ex.resolve({ command: 'long', dshEnv }));
  await proc.done;
  assert.equal(proc.status, 'killed');
  const r = proc.readOutput();
  assert.match(r.delta, /^\[stderr\]\nsandbox unavailable: .*unreachable/);
});

test('denied connections end stderr with a note naming the hosts', () => {
  const egress = [
    { host: 'api.example', port: 443, verdict: 'allowed', reason: 'allow api.example' },
    { host: 'evil.test', port: 443, verdict: 'denied', reason: 'not in the allowlist' },
    { host: '::1', port: 80, verdict: 'denied', reason: 'loopback' },
    { host: 'evil.test', port: 443, verdict: 'denied', reason: 'not in the allowlist' },
  ];
  const note = '[network: the sandbox denied connections to evil.test:443, [::1]:80; a policy decision, not a network fault]';
  assert.equal(denialNote(egress), note);
  const r = runResult({ exitCode: 7, stdout: { text: '' }, stderr: { text: 'curl: (7) Failed to connect' }, egress }, 1000);
  assert.equal(r.stderr.text, `curl: (7) Failed to connect\n${note}\n`);
  assert.equal(r.exitCode, 7);
  const quiet = runResult({ exitCode: 0, stdout: { text: 'ok\n' }, stderr: { text: '' }, egress: egress.slice(0, 1) }, 1000);
  assert.equal(quiet.stderr.text, '');
  const many = Array.from({ length: 8 }, (_, i) => ({ host: `h${i}.test`, port: 443, verdict: 'denied', reason: 'r' }));
  assert.match(denialNote(many), /h4\.test:443 and 3 more;/);
});
