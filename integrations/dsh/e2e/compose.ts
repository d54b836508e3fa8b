// The composition of dsh's own packages that the end-to-end drivers run
// (e2e/dshloop.ts, e2e/dshrecord.ts, e2e/dshlogs.ts): the smallest set that runs dsh's
// agent loop. The session store with JSONL or SQLite persistence, the LLM
// runtime with the DeepSeek adapter (pointed at `dsh-sandbox
// replay-model`), the default model, the system prompt, the tool runtime,
// dsh's shell-env registry, the local job registry, dsh's bash tool and,
// as the one `ctx.shell` provider, SandboxServiceExecutor (or a subclass
// of it), or dsh's own local executor when the server is "local". No launcher, bundle or patch file: the same plugins dsh-base
// loads, wired by hand. This file is ours; dsh's code is never copied here.

import { Context } from '@deepseek-ai/cordis';
import { SessionStore } from '@deepseek-ai/dsh-session';
import JsonlSessionPersistence from '@deepseek-ai/dsh-session-persistence-jsonl';
import SqliteSessionPersistence from '@deepseek-ai/dsh-session-persistence-sqlite';
import AgentRegistry from '@deepseek-ai/dsh-agent';
import AgentLoop from '@deepseek-ai/dsh-agent-loop';
import AgentDefaultModelConfig from '@deepseek-ai/dsh-agent-default-model';
import LlmRuntime from '@deepseek-ai/dsh-llm';
import * as llmDeepSeek from '@deepseek-ai/dsh-llm-deepseek';
import SystemPrompt from '@deepseek-ai/dsh-system-prompt';
import ToolRuntime from '@deepseek-ai/dsh-tools';
import * as shellEnv from '@deepseek-ai/dsh-shell-env';
import LocalJobRegistry from '@deepseek-ai/dsh-jobs-local';
import * as toolBash from '@deepseek-ai/dsh-tool-bash';
import BashLocal from '@deepseek-ai/dsh-bash-local';
import SubprocessLocal from '@deepseek-ai/dsh-subprocess-local';
import { SandboxServiceExecutor } from '../src/index.ts';

/** What a composition needs. */
export interface ComposeConfig {
  /** The replay model's base URL. */
  baseURL: string;
  /** The service: unix:///PATH; "local" runs dsh's own local bash
   * executor (@deepseek-ai/dsh-bash-local, no sandbox) instead. */
  server: string;
  /** dsh's home (DSH_HOME). */
  home: string;
  /** The provider's default working directory. */
  cwd: string;
  /** "jsonl" (default) or "sqlite". */
  persistence?: 'jsonl' | 'sqlite';
  /** JSONL: the sessions root. */
  sessionsRoot?: string;
  /** JSONL: "zstd" (default) or "none". */
  compression?: 'zstd' | 'none';
  /** SQLite: the database file. */
  sqlitePath?: string;
  /** The service's policy name; default "workspace-write". */
  policy?: string;
}

/** The DeepSeek adapter's provider route and a model of its catalog. */
export const PROVIDER = 'deepseek-official';
export const MODEL = 'deepseek-v4-flash';
/** Longer than any turn of the tests: only an explicit flush writes. */
export const WRITE_BEHIND_MS = 10 * 60 * 1000;

/** Checks that c names every required field (by name) and a known persistence. */
export function checkConfig(c: ComposeConfig & Record<string, unknown>, required: readonly string[]): void {
  for (const k of ['baseURL', 'server', 'home', 'cwd', ...required]) {
    if (typeof c[k] !== 'string' || c[k] === '') throw new Error(`config: ${k}: required`);
  }
  const p = c.persistence ?? 'jsonl';
  if (p === 'jsonl' && (typeof c.sessionsRoot !== 'string' || c.sessionsRoot === '')) throw new Error('config: sessionsRoot: required with jsonl persistence');
  if (p === 'sqlite' && (typeof c.sqlitePath !== 'string' || c.sqlitePath === '')) throw new Error('config: sqlitePath: required with sqlite persistence');
  if (p !== 'jsonl' && p !== 'sqlite') throw new Error(`config: persistence: ${JSON.stringify(p)} is neither jsonl nor sqlite`);
}

/** Composes dsh with executor (SandboxServiceExecutor or a subclass) as ctx.shell. */
export function compose(c: ComposeConfig, executor: typeof SandboxServiceExecutor = SandboxServiceExecutor): Context {
  const ctx = new Context();
  const plugin = (p: unknown, config?: unknown): void => {
    (ctx as any).plugin(p, config);
  };
  plugin(SessionStore);
  if ((c.persistence ?? 'jsonl') === 'sqlite') plugin(SqliteSessionPersistence, { path: c.sqlitePath, writeBatchMaxDelayMs: WRITE_BEHIND_MS });
  else plugin(JsonlSessionPersistence, { root: c.sessionsRoot, compression: c.compression ?? 'zstd', writeBatchMaxDelayMs: WRITE_BEHIND_MS });
  plugin(LlmRuntime);
  plugin(llmDeepSeek, { baseURL: c.baseURL });
  plugin(AgentDefaultModelConfig, { provider: PROVIDER, model: MODEL });
  plugin(SystemPrompt, {});
  plugin(ToolRuntime, {});
  plugin(shellEnv, { dshHome: c.home });
  plugin(LocalJobRegistry, {});
  if (c.server === 'local') {
    plugin(SubprocessLocal, {});
    plugin(BashLocal, { cwd: c.cwd });
  } else {
    plugin(executor, { server: c.server, policy: c.policy ?? 'workspace-write', cwd: c.cwd });
  }
  plugin(toolBash, {});
  plugin(AgentRegistry);
  plugin(AgentLoop, {});
  return ctx;
}

/** Resolves with a context in which every named service is ready. */
export function scoped(ctx: Context, services: readonly string[]): Promise<any> {
  return new Promise<any>((resolve) => {
    (ctx as any).inject(services, (sctx: any) => resolve(sctx));
  });
}

/** The text blocks of every tool result of the events, in order. */
export function toolResults(events: readonly any[]): string[] {
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
