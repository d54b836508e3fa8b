// Drives dsh's real code (the @deepseek-ai packages pinned in
// package.json, installed by scripts/setup.sh) for the differential test
// in this directory. It reads one JSON case per line on stdin and writes
// one JSON result per line on stdout, in order. A case is
// {"op": ..., ...}; a result is {"ok": true, ...} or {"ok": false,
// "error": message}. This file is ours; dsh's code is never copied here.
//
// No string field holds a lone surrogate, which the Go side cannot hold
// either; tool inputs travel as JSON text and may spell one as an escape.

import { createInterface } from "node:readline";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Context } from "@deepseek-ai/cordis";
import JsonlSessionPersistence from "@deepseek-ai/dsh-session-persistence-jsonl";
import SqliteSessionPersistence from "@deepseek-ai/dsh-session-persistence-sqlite";
import { Session } from "@deepseek-ai/dsh-session";
import { SessionFormatUnsupportedError } from "@deepseek-ai/dsh-session-persistence";
import { resolveDshHome } from "@deepseek-ai/dsh-home-paths";
import { apply as applyShellEnv } from "@deepseek-ai/dsh-shell-env";
import * as claudeCode from "@deepseek-ai/dsh-hooks-claude-code";
import * as codex from "@deepseek-ai/dsh-hooks-codex";

const scratch = mkdtempSync(join(tmpdir(), "dsh-interop-"));
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));

// A cordis context with the one service the JSONL store's coordinator
// looks up at construction (the live session list, empty here).
function storeContext() {
	const ctx = new Context();
	ctx.provide("sessions");
	ctx.set("sessions", { list: () => [] });
	return ctx;
}

const stores = new Map();
function store(root, compression) {
	const key = `${compression}\0${root}`;
	let s = stores.get(key);
	if (s === undefined) {
		s = new JsonlSessionPersistence(storeContext(), { root, ...(compression === undefined ? {} : { compression }) });
		stores.set(key, s);
	}
	return s;
}

// sqliteStore returns dsh's SQLite store of the database at path, opened
// once and kept open for the driver's life.
const sqliteStores = new Map();
async function sqliteStore(path) {
	let s = sqliteStores.get(path);
	if (s === undefined) {
		s = new SqliteSessionPersistence(storeContext(), { path, journalMode: "wal" });
		sqliteStores.set(path, s);
	}
	await s.ready;
	return s;
}

// freshStore builds a store that is used once (a case with its own root).
function freshStore(root, compression) {
	return new JsonlSessionPersistence(storeContext(), { root, ...(compression === undefined ? {} : { compression }) });
}

const ops = {
	// Where dsh's JSONL store puts a session: {root, compression?, id, cwd?}.
	locate(c) {
		return store(c.root, c.compression).locate({ id: c.id, ...(c.cwd == null ? {} : { cwd: c.cwd }) });
	},
	// Load one stored log the way dsh does: the store finds the session's
	// file under the root by id and reads it (loadStored), then the session
	// restores from it, validating the header and every event.
	// {root, compression, id}
	async load(c) {
		const s = freshStore(c.root, c.compression);
		try {
			const prefix = await s.loadStored(c.id);
			if (prefix === undefined) return { ok: false, error: "no stored session", notFound: true };
			Session.fromRestore(c.id, prefix.events, prefix.meta);
			return { header: prefix.meta, events: prefix.events };
		} catch (error) {
			return { ok: false, error: String(error?.message ?? error), unsupported: error instanceof SessionFormatUnsupportedError };
		}
	},
	// Write a log with dsh's JSONL store: the header and the first batch
	// materialize the file, every later batch is one durable append.
	// {root, compression, header, batches: [[event…]…]}
	async write(c) {
		const s = freshStore(c.root, c.compression);
		let first = true;
		for (const batch of c.batches) {
			await s.appendBatch(c.header, batch, !first);
			first = false;
		}
		return s.locate(c.header);
	},
	// Write a session into an SQLite database with dsh's SQLite store, one
	// transaction per batch. {path, header, batches}
	async sqliteWrite(c) {
		const s = await sqliteStore(c.path);
		let first = true;
		for (const batch of c.batches) {
			await s.appendBatch(c.header, batch, !first);
			first = false;
		}
		return {};
	},
	// Load a session from an SQLite database with dsh's SQLite store, then
	// restore it. {path, id}
	async sqliteLoad(c) {
		const s = await sqliteStore(c.path);
		try {
			const prefix = await s.loadStored(c.id);
			if (prefix === undefined) return { ok: false, error: "no stored session", notFound: true };
			Session.fromRestore(c.id, prefix.events, prefix.meta);
			return { header: prefix.meta, events: prefix.events };
		} catch (error) {
			return { ok: false, error: String(error?.message ?? error) };
		}
	},
	// dsh's home: {configured?, dshHome? (the $DSH_HOME value, absent =
	// unset), home? ($HOME, absent = unset), cwd}.
	home(c) {
		setEnv("HOME", c.home);
		process.chdir(c.cwd);
		const env = c.dshHome === undefined ? {} : { DSH_HOME: c.dshHome };
		return { home: resolveDshHome(c.configured ?? undefined, env) };
	},
	// The DSH_* snapshot of one shell call, from dsh's shell-env plugin as
	// it loads (apply: the registry plus its persistence contributor) over
	// dsh's JSONL store or a store without files (SQLite). {dshHome?,
	// root, compression?, header? (absent = a call with no agent), sqlite?}
	shellEnv(c) {
		const ctx = new Context();
		ctx.provide("sessionPersistence");
		ctx.set("sessionPersistence", c.sqlite ? { locate() {} } : store(c.root, c.compression));
		applyShellEnv(ctx, c.dshHome === undefined ? {} : { dshHome: c.dshHome });
		const execution = c.header === undefined ? {} : { agent: { session: { header: c.header } } };
		return { env: ctx.get("shellEnv").collect(execution) };
	},
	// One hook payload: what a bridge writes on a hook's stdin, and the
	// environment it adds. {dialect, event, header?, childHeader?, root,
	// compression?, sqlite?, cwd (the process cwd), turn, toolName,
	// toolInput (JSON text), toolUseId, toolResponse, prompt, source,
	// model?, agentId?, projectDir?}
	hook: (c) => hookPayload(c),
};

function setEnv(name, value) {
	if (value === undefined || value === null) delete process.env[name];
	else process.env[name] = value;
}

async function hookPayload(c) {
	process.chdir(c.cwd);
	const bridge = c.dialect === "codex" ? codex : claudeCode;
	const configPath = join(scratch, `${c.dialect}.json`);
	const hooks = {};
	for (const event of ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "SubagentStart", "SubagentStop"]) {
		hooks[event] = [{ hooks: [{ type: "command", command: "hook" }] }];
	}
	writeFileSync(configPath, JSON.stringify({ hooks }));
	const persistence = c.sqlite ? { locate() {} } : store(c.root, c.compression);
	const agentFor = (header) => header === undefined ? undefined : {
		session: { header, events: [{ type: "turn/start", seq: 0, time: 0, data: { turn: c.turn } }], append() {} },
		inject() {},
		steer() {},
	};
	const agent = agentFor(c.header);
	const child = agentFor(c.childHeader);
	const handlers = new Map();
	let captured;
	const shell = {
		resolve: (request) => request,
		async run(request) {
			captured = { stdin: request.stdin, env: request.env ?? {}, workdir: request.workdir };
			return { exitCode: 0, stdout: { text: "" }, stderr: { text: "" } };
		},
	};
	const ctx = {
		logger: { warn() {}, info() {}, debug() {} },
		effect() {},
		on(name, fn) { handlers.set(name, fn); },
		get(name) {
			if (name === "sessionPersistence") return persistence;
			if (name === "agents") return { get: (id) => (id === c.agentId ? child : undefined) };
			return undefined;
		},
		shell,
		bash: shell,
	};
	bridge.apply(ctx, {
		configPath,
		...(c.model === undefined ? {} : { model: c.model }),
		...(c.projectDir === undefined ? {} : { projectDir: c.projectDir }),
	});
	const signal = new AbortController().signal;
	const next = async () => ({ kind: "enter", messages: [] });
	const exec = { agent, name: c.toolName, arguments: c.toolInput === undefined ? {} : JSON.parse(c.toolInput), callId: c.toolUseId, signal };
	switch (c.event) {
		case "SessionStart":
			handlers.get("agent/session-start")({ agent, source: c.source });
			break;
		case "UserPromptSubmit":
			await handlers.get("agent/pre-step")({ agent, messages: [{ content: [{ type: "text", text: c.prompt }] }], turn: c.turn, signal }, next);
			break;
		case "PreToolUse":
			await handlers.get("tools/pre-execute")(exec, next);
			break;
		case "PostToolUse":
			await handlers.get("tools/post-execute")(exec, { content: [{ type: "text", text: c.toolResponse }] }, next);
			break;
		case "Stop":
			await handlers.get("agent/turn-stopping")({ agent, turn: c.turn, signal });
			break;
		case "SubagentStart":
			handlers.get("subagent/start")({ id: c.agentId, runId: "run-1" });
			break;
		case "SubagentStop":
			handlers.get("subagent/end")({ id: c.agentId, runId: "run-1" });
			break;
		default:
			throw new Error(`unknown event ${c.event}`);
	}
	// Detached points (session start, subagents) run their hook after the
	// handler returns; give them their turn of the event loop.
	for (let i = 0; i < 20 && captured === undefined; i++) await new Promise((r) => setImmediate(r));
	if (captured === undefined) return { ok: false, error: "the bridge ran no hook" };
	return captured;
}

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
	if (line === "") continue;
	let result;
	try {
		const c = JSON.parse(line);
		const fn = ops[c.op];
		if (fn === undefined) throw new Error(`unknown op ${JSON.stringify(c.op)}`);
		result = await fn(c);
		if (result === undefined || result.ok === undefined) result = { ok: true, ...result };
	} catch (error) {
		result = { ok: false, error: String(error?.message ?? error) };
	}
	process.stdout.write(JSON.stringify(result) + "\n");
}
