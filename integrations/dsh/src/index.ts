// A Service Provider for dsh's `ctx.shell` seam (@deepseek-ai/dsh-shell)
// that runs every foreground and background bash call through a running
// `dsh-sandbox serve`, each in its own short-lived container. Load it in
// place of @deepseek-ai/dsh-bash-local (one provider of ctx.shell per
// composition). It fails closed: when the service cannot be reached, or
// refuses, the call rejects with a HarnessError of code
// SANDBOX_UNAVAILABLE (dsh's own "sandbox unavailable" class) and nothing
// runs on the host.
//
// What it sends: the command, workdir, timeout, the policy name from its
// configuration, the calling session's header (from ctx.agents, by the
// DSH_SESSION_ID of the trusted dshEnv snapshot) and that dshEnv snapshot
// itself. The service derives the DSH_* snapshot and every mount itself
// and only compares: it refuses a dshEnv whose built-ins (DSH_HOME,
// DSH_SHELL, DSH_SESSION_ID, DSH_SESSION_JSONL) differ from its own, and
// takes other DSH_* keys of dsh's registry only from a harness client (a
// socket peer, or a token marked "harness"). Model-supplied env and stdin
// never reach the model-facing path (dsh-tool-bash does not expose them);
// a trusted in-process caller's stdin and ordinary env are forwarded.

import type { Context } from '@deepseek-ai/cordis';
import { ShellExecutor } from '@deepseek-ai/dsh-shell';
import type {
  CollectedOutput,
  ShellExecRequest,
  ShellExecSpec,
  ShellProcess,
  ShellProcessRead,
  ShellProcessStatus,
  ShellRunResult,
} from '@deepseek-ai/dsh-shell';
import { HarnessError } from '@deepseek-ai/dsh-llm';
import { SANDBOX_UNAVAILABLE } from '@deepseek-ai/dsh-sandbox';
import { call, parseServer, ServiceError, streamRun } from './client.ts';
import type { Endpoint, RunEvent } from './client.ts';

export { ServiceError } from './client.ts';

/** Plugin config. */
export interface Config {
  /** The service: unix:///PATH or tcp://HOST:PORT. Required. */
  server: string;
  /** Bearer token file (mode 0600) for a tcp:// server. */
  tokenFile?: string;
  /** Policy name the service knows; default "workspace-write". */
  policy?: string;
  /** Default working directory; default process.cwd(). */
  cwd?: string;
  /** Default foreground timeout in ms; default 120000. */
  timeoutMs?: number;
  /** Cap of per-call timeouts in ms; default 600000. */
  maxTimeoutMs?: number;
  /** Tail kept per stream, also for unread background output; default 64000. */
  maxOutputBytes?: number;
  /** How often a running background job is polled, in ms; default 250. */
  pollMs?: number;
}

const DEFAULTS = { policy: 'workspace-write', timeoutMs: 120_000, maxTimeoutMs: 600_000, maxOutputBytes: 64_000, pollMs: 250 };

/** Consecutive failed polls after which a background job settles as killed. */
const MAX_POLL_FAILURES = 5;

/** The error every unusable-service failure becomes. */
export function sandboxUnavailable(detail: string, cause?: unknown): HarnessError {
  const err = new HarnessError(`sandbox unavailable: dsh-sandbox could not run the command, so nothing ran: ${detail}`, SANDBOX_UNAVAILABLE, cause === undefined ? undefined : { cause });
  err.name = 'SandboxUnavailableError';
  return err;
}

function positive(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new Error(`dsh-sandbox shell config: ${name}: must be a positive number, got ${String(v)}`);
  return v;
}

/** A session header as the service's wire takes it. */
interface WireHeader {
  type: 'session';
  version: number;
  id: string;
  createdAt: number;
  cwd?: string;
  parentSession?: string;
  seedLength?: number;
  origin?: string;
  delegationDepth?: number;
  agentPreset?: string;
}

/**
 * The ctx.shell provider over `dsh-sandbox serve`.
 */
export class SandboxServiceExecutor extends ShellExecutor {
  static inject: string[] = [];

  readonly config: Required<Omit<Config, 'tokenFile' | 'cwd'>> & Pick<Config, 'tokenFile' | 'cwd'>;
  private readonly endpoint: Endpoint;
  private readonly live = new Set<BackgroundJob>();

  constructor(ctx: Context, config: Config) {
    super(ctx);
    if (config === undefined || typeof config.server !== 'string' || config.server === '') throw new Error('dsh-sandbox shell config: server: required (unix:///PATH or tcp://HOST:PORT)');
    this.config = {
      server: config.server,
      tokenFile: config.tokenFile,
      policy: config.policy ?? DEFAULTS.policy,
      cwd: config.cwd,
      timeoutMs: positive('timeoutMs', config.timeoutMs, DEFAULTS.timeoutMs),
      maxTimeoutMs: positive('maxTimeoutMs', config.maxTimeoutMs, DEFAULTS.maxTimeoutMs),
      maxOutputBytes: positive('maxOutputBytes', config.maxOutputBytes, DEFAULTS.maxOutputBytes),
      pollMs: positive('pollMs', config.pollMs, DEFAULTS.pollMs),
    };
    if (this.config.policy === '' || /[\0/]/.test(this.config.policy)) throw new Error(`dsh-sandbox shell config: policy: ${JSON.stringify(this.config.policy)} is not a policy name`);
    this.endpoint = parseServer(this.config.server, this.config.tokenFile);
    // Composition teardown kills every running job and waits for it.
    ctx.effect(() => async () => {
      const jobs = [...this.live];
      for (const j of jobs) j.kill();
      await Promise.all(jobs.map((j) => j.done));
    }, 'dsh-sandbox background jobs');
  }

  resolve(request: ShellExecRequest): ShellExecSpec {
    const timeout = request.timeoutMs === undefined ? this.config.timeoutMs : Math.min(request.timeoutMs, this.config.maxTimeoutMs);
    return {
      command: request.command,
      workdir: request.workdir ?? this.config.cwd ?? process.cwd(),
      timeoutMs: timeout,
      stdoutMaxBytes: request.stdoutMaxBytes ?? this.config.maxOutputBytes,
      ...(request.signal === undefined ? {} : { signal: request.signal }),
      ...(request.stdin === undefined ? {} : { stdin: request.stdin }),
      ...(request.env === undefined ? {} : { env: request.env }),
      ...(request.dshEnv === undefined ? {} : { dshEnv: request.dshEnv }),
      sandboxPolicy: request.sandboxPolicy,
    };
  }

  /**
   * The calling session's header, found by the snapshot's DSH_SESSION_ID.
   * A call with an id whose session is unknown fails closed: the service
   * would otherwise mount the wrong transcript directory.
   */
  private header(spec: ShellExecSpec): WireHeader | undefined {
    const id = spec.dshEnv?.DSH_SESSION_ID;
    if (id === undefined || id === '') return undefined;
    const agents = (this.ctx as any).get?.('agents');
    const h = agents?.get?.(id)?.session?.header;
    if (h === undefined || h.id !== id) throw sandboxUnavailable(`the header of session ${JSON.stringify(id)} (DSH_SESSION_ID) is not known to ctx.agents`);
    const wire: WireHeader = { type: 'session', version: h.version, id: h.id, createdAt: h.createdAt };
    for (const k of ['cwd', 'parentSession', 'seedLength', 'origin', 'delegationDepth', 'agentPreset'] as const) {
      if (h[k] !== undefined) (wire as any)[k] = h[k];
    }
    return wire;
  }

  /** The service's RunRequest for spec. */
  private body(spec: ShellExecSpec): Record<string, unknown> {
    if (spec.command === '' || spec.command.includes('\0')) throw new Error('command: empty or contains a NUL byte');
    const header = this.header(spec);
    const body: Record<string, unknown> = {
      policy: this.config.policy,
      command: spec.command,
      workdir: spec.workdir,
      timeoutMs: Math.max(1, Math.round(spec.timeoutMs)),
      stdoutMaxBytes: spec.stdoutMaxBytes,
    };
    if (header !== undefined) body.session = header;
    else body.cwd = spec.workdir; // a call with no agent works in its directory
    if (spec.dshEnv !== undefined) body.dshEnv = snapshot(spec.dshEnv);
    if (spec.env !== undefined) {
      const env: string[] = [];
      for (const [k, v] of Object.entries(spec.env)) {
        if (v === undefined || k.toUpperCase().startsWith('DSH_')) continue; // DSH_* comes only from the service's snapshot
        env.push(`${k}=${v}`);
      }
      if (env.length > 0) body.env = env;
    }
    if (spec.stdin !== undefined) body.stdin = Buffer.from(spec.stdin, 'utf8').toString('base64');
    return body;
  }

  async run(spec: ShellExecSpec): Promise<ShellRunResult> {
    if (spec.signal?.aborted) {
      const err = new Error('aborted before the command started');
      err.name = 'AbortError';
      throw err;
    }
    const body = this.body(spec);
    let result: any;
    let failure: RunEvent['error'];
    const seen = { stdout: new Tail(spec.stdoutMaxBytes), stderr: new Tail(this.config.maxOutputBytes) };
    try {
      await streamRun(this.endpoint, body, spec.signal, (ev) => {
        if (ev.type === 'stdout' || ev.type === 'stderr') seen[ev.type].push(Buffer.from(ev.data ?? '', 'base64').toString('utf8'));
        else if (ev.type === 'result') result = ev.result;
        else if (ev.type === 'error') failure = ev.error;
      });
    } catch (err) {
      if (spec.signal?.aborted) {
        // Closing the stream cancelled the call in the service, which
        // stops its container; what arrived so far is the output.
        return {
          exitCode: null,
          signal: 'SIGTERM',
          timedOut: false,
          aborted: true,
          timeoutMs: spec.timeoutMs,
          stdout: seen.stdout.collected(),
          stderr: seen.stderr.collected(),
        };
      }
      throw sandboxUnavailable((err as Error).message, err);
    }
    if (failure !== undefined) throw sandboxUnavailable(`${failure.class}${failure.field === undefined ? '' : ` (${failure.field})`}: ${failure.message}`);
    if (result === undefined) throw sandboxUnavailable('the service ended the stream without a result');
    return runResult(result, spec.timeoutMs);
  }

  start(spec: ShellExecSpec): ShellProcess {
    const job = new BackgroundJob(this.endpoint, this.config.maxOutputBytes, this.config.pollMs);
    let body: Record<string, unknown>;
    try {
      body = this.body(spec);
    } catch (err) {
      job.fail(err as Error);
      return job;
    }
    this.live.add(job);
    void job.done.then(() => this.live.delete(job));
    job.begin(body, typeof body.session === 'object' ? (body.session as WireHeader).id : '');
    return job;
  }
}

export default SandboxServiceExecutor;

/**
 * dsh's dshEnv as the service's wire takes it: every entry with a string
 * value, unchanged (the service validates names and compares values; a
 * bad one is refused there, never dropped here).
 */
function snapshot(env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) {
    if (typeof v === 'string') out[k] = v;
  }
  return out;
}

/** The service's Stream as dsh's CollectedOutput. A spill file outside the sandbox is not offered. */
function collected(s: any): CollectedOutput {
  const out: CollectedOutput = { text: typeof s?.text === 'string' ? s.text : '', truncated: s?.truncated === true };
  if (out.truncated && typeof s?.spillPath === 'string' && s.spillPath !== '' && s.spillInside === true) out.spillPath = s.spillPath;
  return out;
}

/**
 * The note naming the hosts the egress policy denied the call, as the
 * service's rendered text ends (sandbox.DenialNote): at most five hosts
 * named, the rest counted; '' without denials.
 */
export function denialNote(egress: unknown): string {
  if (!Array.isArray(egress)) return '';
  const hosts: string[] = [];
  for (const c of egress) {
    if (c?.verdict !== 'denied' || typeof c.host !== 'string') continue;
    const hp = `${c.host.includes(':') ? `[${c.host}]` : c.host}:${Number(c.port) || 0}`;
    if (!hosts.includes(hp)) hosts.push(hp);
  }
  if (hosts.length === 0) return '';
  let list = hosts.slice(0, 5).join(', ');
  if (hosts.length > 5) list += ` and ${hosts.length - 5} more`;
  return `[network: the sandbox denied connections to ${list}; a policy decision, not a network fault]`;
}

/**
 * The service's Result as dsh's ShellRunResult. When connections were
 * denied, stderr ends with denialNote, so that the model reads a policy
 * decision where it would otherwise guess at a network fault (dsh's bash
 * tool renders the exit markers after it).
 */
export function runResult(r: any, timeoutMs: number): ShellRunResult {
  const stderr = collected(r?.stderr);
  const note = denialNote(r?.egress);
  if (note !== '') stderr.text += `${stderr.text === '' || stderr.text.endsWith('\n') ? '' : '\n'}${note}\n`;
  return {
    exitCode: typeof r?.exitCode === 'number' ? r.exitCode : null,
    signal: typeof r?.signal === 'string' && r.signal !== '' ? (r.signal as NodeJS.Signals) : null,
    timedOut: r?.timedOut === true,
    aborted: r?.aborted === true && r?.timedOut !== true,
    timeoutMs: typeof r?.timeoutMs === 'number' ? r.timeoutMs : timeoutMs,
    stdout: collected(r?.stdout),
    stderr,
  };
}

/** The newest max bytes of a stream, and whether older ones were dropped. */
class Tail {
  private text = '';
  dropped = 0;
  private readonly max: number;
  constructor(max: number) {
    this.max = max;
  }
  push(s: string): void {
    this.text += s;
    const over = Buffer.byteLength(this.text, 'utf8') - this.max;
    if (over > 0) {
      const b = Buffer.from(this.text, 'utf8');
      let start = over;
      while (start < b.length && (b[start] & 0xc0) === 0x80) start++; // not inside a character
      this.dropped += start;
      this.text = b.subarray(start).toString('utf8');
    }
  }
  take(): string {
    const t = this.text;
    this.text = '';
    return t;
  }
  collected(): CollectedOutput {
    return { text: this.text, truncated: this.dropped > 0 };
  }
}

/** A background job in the service, seen through dsh's ShellProcess. */
class BackgroundJob implements ShellProcess {
  status: ShellProcessStatus = 'running';
  exitCode: number | null = null;
  signal: NodeJS.Signals | null = null;
  readonly done: Promise<void>;

  private settle!: () => void;
  private readonly ep: Endpoint;
  private readonly pollMs: number;
  private readonly out: Tail;
  private readonly err: Tail;
  private id: string | undefined;
  private session = '';
  private lossy = false;
  private killRequested = false;
  private failures = 0;
  private stdoutSpill: string | undefined;
  private stderrSpill: string | undefined;

  constructor(ep: Endpoint, maxBytes: number, pollMs: number) {
    this.ep = ep;
    this.pollMs = pollMs;
    this.out = new Tail(maxBytes);
    this.err = new Tail(maxBytes);
    this.done = new Promise((resolve) => {
      this.settle = resolve;
    });
  }

  /** Starts the job in the service, then polls it until it has ended. */
  begin(body: Record<string, unknown>, session: string): void {
    this.session = session;
    call(this.ep, 'POST', '/v1/jobs', body).then(
      (answer) => {
        if (typeof answer?.id !== 'string' || answer.id === '') {
          this.fail(sandboxUnavailable('the service answered without a job id'));
          return;
        }
        this.id = answer.id;
        if (this.killRequested) void this.requestKill();
        this.schedule();
      },
      (err) => this.fail(sandboxUnavailable((err as Error).message, err)),
    );
  }

  private path(suffix = ''): string {
    return `/v1/jobs/${encodeURIComponent(this.id ?? '')}${suffix}?session=${encodeURIComponent(this.session)}`;
  }

  private schedule(): void {
    setTimeout(() => void this.poll(), this.pollMs);
  }

  private async poll(): Promise<void> {
    if (this.status !== 'running') return;
    let o: any;
    try {
      o = await call(this.ep, 'GET', this.path());
      this.failures = 0;
    } catch (err) {
      if (++this.failures >= MAX_POLL_FAILURES || (err instanceof ServiceError && err.status === 404)) {
        this.fail(sandboxUnavailable(`job ${this.id}: ${(err as Error).message}`, err));
        return;
      }
      this.schedule();
      return;
    }
    if (typeof o.stdout === 'string') this.out.push(o.stdout);
    if (typeof o.stderr === 'string') this.err.push(o.stderr);
    if ((o.stdoutDropped ?? 0) > 0 || (o.stderrDropped ?? 0) > 0) this.lossy = true;
    if (o.done !== true) {
      this.schedule();
      return;
    }
    if (o.error !== undefined && o.result === undefined) {
      this.fail(sandboxUnavailable(`job ${this.id}: ${o.error.class}: ${o.error.message}`));
      return;
    }
    const r = runResult(o.result, 0);
    this.exitCode = r.exitCode;
    this.signal = r.signal;
    this.stdoutSpill = r.stdout.spillPath;
    this.stderrSpill = r.stderr.spillPath;
    // A job the policy's job deadline stopped ended timed out: it did
    // not complete. As dsh's own processes, anything a signal ended is
    // killed; the deadline is said on stderr, where the model reads it.
    if (r.timedOut) this.err.push(`[timed out after ${r.timeoutMs}ms]\n`);
    const stopped = this.killRequested || r.timedOut || r.aborted || r.signal !== null;
    this.finish(stopped ? 'killed' : 'completed');
  }

  /** Settles the job as killed with err's message on stderr (a job that never ran, or was lost). */
  fail(err: Error): void {
    if (this.status !== 'running') return;
    this.err.push(`${err.message}\n`);
    this.finish('killed');
  }

  private finish(status: ShellProcessStatus): void {
    this.status = status;
    this.settle();
  }

  private async requestKill(): Promise<void> {
    try {
      await call(this.ep, 'POST', this.path('/kill'));
    } catch {
      // the next poll sees the outcome, or settles the job as lost
    }
  }

  readOutput(): ShellProcessRead {
    const stdout = this.out.take();
    const stderr = this.err.take();
    let delta = stdout;
    if (stderr !== '') {
      if (delta !== '' && !delta.endsWith('\n')) delta += '\n';
      delta += `[stderr]\n${stderr}`;
    }
    const lossy = this.lossy || this.out.dropped > 0 || this.err.dropped > 0;
    this.lossy = false;
    this.out.dropped = 0;
    this.err.dropped = 0;
    const read: ShellProcessRead = { delta, lossy };
    if (lossy && this.stdoutSpill !== undefined) read.stdoutSpillPath = this.stdoutSpill;
    if (lossy && this.stderrSpill !== undefined) read.stderrSpillPath = this.stderrSpill;
    return read;
  }

  kill(): boolean {
    if (this.status !== 'running') return false;
    if (!this.killRequested) {
      this.killRequested = true;
      if (this.id !== undefined) void this.requestKill();
    }
    return true;
  }
}
