// HTTP/JSON client of `dsh-sandbox serve` (api/openapi.yaml): one-shot
// JSON requests and the NDJSON event stream of a foreground run, over a
// Unix socket or TCP with a bearer token. Every failure to reach the
// service, or an answer that is not the service's, is a ServiceError with
// reachable=false: the provider then fails closed and never runs anything
// on the host.

import { request as httpRequest } from 'node:http';
import type { ClientRequest, IncomingMessage, RequestOptions } from 'node:http';
import { readFileSync, statSync } from 'node:fs';

/** Where the service listens. */
export interface Endpoint {
  /** Unix socket path (unix:///PATH). */
  socketPath?: string;
  /** TCP host and port (tcp://HOST:PORT). */
  host?: string;
  port?: number;
  /** Bearer token for TCP. */
  token?: string;
}

/** The service's error body: {"error": {class, field?, message}}. */
export interface ErrorBody {
  class: string;
  field?: string;
  message: string;
}

/** A failed exchange with the service. */
export class ServiceError extends Error {
  /** HTTP status; 0 when the service did not answer. */
  readonly status: number;
  /** The service's error body, when it sent one. */
  readonly body: ErrorBody | undefined;
  constructor(message: string, status: number, body?: ErrorBody) {
    super(message);
    this.name = 'ServiceError';
    this.status = status;
    this.body = body;
  }
  /** True when the service answered (a 4xx/5xx of its own). */
  get reachable(): boolean {
    return this.status !== 0;
  }
}

/** Largest JSON answer read into memory. */
const MAX_ANSWER_BYTES = 64 << 20;

/**
 * Parse "unix:///PATH" or "tcp://HOST:PORT". A TCP endpoint needs a token
 * file (mode 0600, no group or other bits): the token is never taken from
 * configuration text, which may be shared.
 * @param addr - the service address.
 * @param tokenFile - the bearer token file for TCP.
 * @returns the endpoint.
 * @throws Error naming the field when the address or token file is unusable.
 */
export function parseServer(addr: string, tokenFile?: string): Endpoint {
  if (addr.startsWith('unix://')) {
    const socketPath = addr.slice('unix://'.length);
    if (!socketPath.startsWith('/')) throw new Error(`server: ${JSON.stringify(addr)}: the socket path must be absolute (unix:///PATH)`);
    return { socketPath };
  }
  if (addr.startsWith('tcp://')) {
    const url = new URL('http://' + addr.slice('tcp://'.length));
    const port = Number(url.port);
    if (url.hostname === '' || !Number.isInteger(port) || port <= 0) throw new Error(`server: ${JSON.stringify(addr)}: want tcp://HOST:PORT`);
    if (tokenFile === undefined || tokenFile === '') throw new Error('tokenFile: required with a tcp:// server');
    const st = statSync(tokenFile);
    if (!st.isFile() || (st.mode & 0o077) !== 0) throw new Error(`tokenFile: ${tokenFile} must be a regular file of mode 0600`);
    const token = readFileSync(tokenFile, 'utf8').trim();
    if (token === '' || /\s/.test(token)) throw new Error(`tokenFile: ${tokenFile} must hold one token`);
    return { host: url.hostname.replace(/^\[|\]$/g, ''), port, token };
  }
  throw new Error(`server: ${JSON.stringify(addr)} is neither unix:///PATH nor tcp://HOST:PORT`);
}

function options(ep: Endpoint, method: string, path: string): RequestOptions {
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (ep.token !== undefined) headers.Authorization = `Bearer ${ep.token}`;
  const base: RequestOptions = { method, path, headers };
  return ep.socketPath !== undefined ? { ...base, socketPath: ep.socketPath } : { ...base, host: ep.host, port: ep.port };
}

// abortWith destroys req when signal aborts (at once when it already
// has), and stops listening when req closes.
function abortWith(req: ClientRequest, signal: AbortSignal | undefined): void {
  if (signal === undefined) return;
  const onAbort = (): void => {
    req.destroy(new Error('aborted'));
  };
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  req.on('close', () => signal.removeEventListener('abort', onAbort));
}

function unreachable(err: unknown): ServiceError {
  const msg = err instanceof Error ? err.message : String(err);
  return new ServiceError(`dsh-sandbox service unreachable: ${msg}`, 0);
}

function readAll(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_ANSWER_BYTES) {
        res.destroy(new Error(`answer larger than ${MAX_ANSWER_BYTES} bytes`));
        return;
      }
      chunks.push(c);
    });
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('error', reject);
  });
}

/** The error of a non-2xx answer. */
function answerError(status: number, text: string): ServiceError {
  try {
    const body = JSON.parse(text)?.error as ErrorBody | undefined;
    if (body !== undefined && typeof body.message === 'string') {
      const field = body.field === undefined ? '' : ` (${body.field})`;
      return new ServiceError(`dsh-sandbox service: ${status} ${body.class}${field}: ${body.message}`, status, body);
    }
  } catch {
    // not the service's JSON: reported below
  }
  return new ServiceError(`dsh-sandbox service: ${status}: ${text.slice(0, 200)}`, status);
}

/**
 * One JSON request.
 * @param ep - the service.
 * @param method - HTTP method.
 * @param path - path and query.
 * @param body - JSON body, if any.
 * @param signal - aborts the request.
 * @returns the decoded JSON answer of a 2xx.
 * @throws ServiceError for anything else.
 */
export function call(ep: Endpoint, method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<any> {
  return new Promise((resolve, reject) => {
    let req: ClientRequest;
    try {
      req = httpRequest(options(ep, method, path), (res) => {
        readAll(res).then((text) => {
          const status = res.statusCode ?? 0;
          if (status < 200 || status > 299) {
            reject(answerError(status, text));
            return;
          }
          try {
            resolve(text === '' ? {} : JSON.parse(text));
          } catch (err) {
            reject(unreachable(new Error(`answer is not JSON: ${(err as Error).message}`)));
          }
        }, (err) => reject(unreachable(err)));
      });
    } catch (err) {
      reject(unreachable(err));
      return;
    }
    req.on('error', (err) => reject(unreachable(err)));
    abortWith(req, signal);
    if (body !== undefined) {
      req.setHeader('Content-Type', 'application/json');
      req.end(JSON.stringify(body));
    } else {
      req.end();
    }
  });
}

/** One event of a streamed run (api Event). */
export interface RunEvent {
  type: 'stdout' | 'stderr' | 'result' | 'error';
  data?: string;
  result?: any;
  rendered?: string;
  error?: ErrorBody;
}

/**
 * A streamed foreground run: POST /v1/run with "stream": true. Events are
 * handed to onEvent as they arrive. Aborting closes the connection, which
 * makes the service cancel the call.
 * @param ep - the service.
 * @param body - the RunRequest (stream is set here).
 * @param signal - aborts the call.
 * @param onEvent - receives each event.
 * @returns when the stream ended.
 * @throws ServiceError when the service cannot be reached or refuses.
 */
export function streamRun(ep: Endpoint, body: Record<string, unknown>, signal: AbortSignal | undefined, onEvent: (ev: RunEvent) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    let req: ClientRequest;
    try {
      req = httpRequest(options(ep, 'POST', '/v1/run'), (res) => {
        const status = res.statusCode ?? 0;
        if (status < 200 || status > 299) {
          readAll(res).then((text) => reject(answerError(status, text)), (err) => reject(unreachable(err)));
          return;
        }
        let buf = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          buf += chunk;
          let nl: number;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl).trim();
            buf = buf.slice(nl + 1);
            if (line === '') continue;
            try {
              onEvent(JSON.parse(line) as RunEvent);
            } catch (err) {
              res.destroy(err as Error);
              return;
            }
          }
        });
        res.on('end', () => resolve());
        res.on('error', (err) => reject(unreachable(err)));
        res.on('aborted', () => reject(unreachable(new Error('the service closed the stream'))));
      });
    } catch (err) {
      reject(unreachable(err));
      return;
    }
    req.on('error', (err) => reject(unreachable(err)));
    abortWith(req, signal);
    req.setHeader('Content-Type', 'application/json');
    req.end(JSON.stringify({ ...body, stream: true }));
  });
}
