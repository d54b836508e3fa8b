package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/contributors"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// envPrefix is the prefix of the environment variables that stand in for
// global flags, e.g. DSH_SANDBOX_SESSIONS_ROOT for --sessions-root.
const envPrefix = "DSH_SANDBOX_"

func envVar(flag string) []string {
	return []string{envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func globalFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "config", Usage: "read flag values from a YAML or JSON `FILE`: global flags at the top level, each command's in a section named after it (exec:, serve:, hooks: {run: …}); keys are flag names; the command line and the environment win", EnvVars: envVar("config")},
		&cli.StringFlag{Name: "home", Usage: "dsh home `DIR` (default: $DSH_HOME, else ~/.dsh)", EnvVars: envVar("home")},
		&cli.StringFlag{Name: "skills-home", Usage: "the nested (skills) dsh home `DIR`; when set it must resolve to the same directory as the home", EnvVars: envVar("skills-home")},
		&cli.StringFlag{Name: "sessions-root", Usage: "root `DIR` of JSONL transcripts (default: <home>/sessions)", EnvVars: envVar("sessions-root")},
		&cli.StringFlag{Name: "persistence", Value: "jsonl", Usage: "session store that answers Locate: jsonl or sqlite", EnvVars: envVar("persistence")},
		&cli.StringFlag{Name: "compression", Value: "zstd", Usage: "JSONL encoding: zstd (session.jsonl.zstd, dsh's default) or none (session.jsonl)", EnvVars: envVar("compression")},
		&cli.StringFlag{Name: "sqlite-path", Usage: "SQLite database `FILE` (default: <home>/sessions.sqlite)", EnvVars: envVar("sqlite-path")},
		&cli.StringFlag{Name: "session-id", Usage: "the call's agent session `ID`; absent means a call with no agent"},
		&cli.StringFlag{Name: "cwd", Usage: "the session header's cwd `DIR` (default: the current directory)"},
		&cli.BoolFlag{Name: "no-cwd", Usage: "the session header has no cwd"},
		&cli.StringFlag{Name: "workspace-roots", Usage: "`DIRS` (colon-separated, absolute) a call's workspace must lie in; empty means any directory that is not a system directory", EnvVars: envVar("workspace-roots")},
		&cli.StringFlag{Name: "state-dir", Value: "/run/dsh-sandbox", Usage: "`DIR` for bundles, runtime state and locks of running calls", EnvVars: envVar("state-dir")},
		&cli.StringFlag{Name: "data-dir", Value: "/var/lib/dsh-sandbox", Usage: "`DIR` for local images", EnvVars: envVar("data-dir")},
		&cli.StringFlag{Name: "log-format", Value: "json", Usage: "log format on stderr: json or console", EnvVars: envVar("log-format")},
		&cli.StringFlag{Name: "log-level", Value: "warn", Usage: "log level: debug, info, warn or error", EnvVars: envVar("log-level")},
	}, registryFlags()...)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:    "dsh-sandbox",
		Usage:   "run AI agents' shell commands in short-lived containers with exactly the facts they are entitled to",
		Version: version,
		Description: `Every call runs in its own container; the child's environment is a filtered base plus a
trusted snapshot of DSH_* facts; the session's transcript directory is mounted read-only at
the path DSH_SESSION_JSONL names.

Examples:
   dsh-sandbox locate --sessions-root /r --cwd /srv/proj --session-id abc
   dsh-sandbox env show --home /h --session-id abc
   dsh-sandbox session show ~/.dsh/sessions/--srv-proj--/abc/session.jsonl.zstd`,
		Flags:                globalFlags(),
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		Commands: []*cli.Command{
			locateCommand(),
			execCommand(),
			policyCommand(),
			reapCommand(),
			imagesCommand(),
			doctorCommand(),
			benchCommand(),
			envCommand(),
			sessionCommand(),
			serveCommand(),
			auditCommand(),
			hooksCommand(), replayModelCommand(), mcpCommand(),
			callsCommand(), jobsCommand(),
			completionCommand(),
		},
		ExitErrHandler: func(*cli.Context, error) {}, // main maps errors to exit codes
	}
	app.OnUsageError = func(c *cli.Context, err error, _ bool) error { return usageError("%s", flagHint(c.App, err)) }
	app.Action = unknownCommand(func() []*cli.Command { return app.Commands })
	owned := ownedFlags{}
	app.Metadata = map[string]any{ownedFlagsKey: owned}
	for _, c := range app.Commands {
		addGlobalFlags(c, owned) // before setUsageErrors gives groups an Action
		setUsageErrors(c)
		requireFlags(c)
		configurable(c)
	}
	return app
}

// addGlobalFlags lets every command that runs itself — a leaf, or one
// with an Action of its own besides its subcommands (bench, bench service)
// — take the global flags after its name too, as in `dsh-sandbox locate
// --sessions-root /r`.
// A leaf that defines a flag of the same name itself (hooks run --config)
// keeps its own, recorded in owned; the global one is then taken only
// before the command name.
func addGlobalFlags(c *cli.Command, owned ownedFlags) {
	if len(c.Subcommands) == 0 || c.Action != nil {
		own := map[string]bool{}
		for _, f := range c.Flags {
			for _, n := range f.Names() {
				own[n] = true
			}
		}
		var globals []cli.Flag
		for _, g := range globalFlags() {
			if own[g.Names()[0]] {
				owned[c] = append(owned[c], g.Names()[0])
				continue
			}
			globals = append(globals, g)
		}
		c.Flags = append(globals, c.Flags...)
	}
	for _, sub := range c.Subcommands {
		addGlobalFlags(sub, owned)
	}
}

// requireFlags checks the flags a leaf marks Required itself, so that a
// missing one is a usage error (exit 2) like every other bad flag; the
// library's own check ends with a plain error (exit 1).
func requireFlags(c *cli.Command) {
	for _, sub := range c.Subcommands {
		requireFlags(sub)
	}
	var names []string
	for _, f := range c.Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Required {
			sf.Required = false
			names = append(names, sf.Name)
		}
	}
	if len(names) == 0 || c.Action == nil {
		return
	}
	action := c.Action
	c.Action = func(ctx *cli.Context) error {
		for _, n := range names {
			if !ctx.IsSet(n) {
				if slices.ContainsFunc(ctx.Args().Slice(), func(a string) bool { return strings.HasPrefix(a, "-") }) {
					return usageError("--%s is required (flags go before the arguments: %s [flags] %s)", n, ctx.Command.HelpName, ctx.Command.ArgsUsage)
				}
				return usageError("--%s is required", n)
			}
		}
		return action(ctx)
	}
}

func setUsageErrors(c *cli.Command) {
	c.OnUsageError = func(ctx *cli.Context, err error, _ bool) error { return usageError("%s", flagHint(ctx.App, err)) }
	if len(c.Subcommands) > 0 && c.Action == nil {
		c.Action = unknownCommand(func() []*cli.Command { return c.Subcommands })
	}
	for _, sub := range c.Subcommands {
		setUsageErrors(sub)
	}
}

// settings are the resolved global flags, and the daemon flags of a
// command that takes them.
type settings struct {
	home         string
	sessionsRoot string
	persistence  string
	compression  jsonl.Compression
	sqlitePath   string
	header       *session.Header // nil: a call with no agent
	cwd          string          // the session cwd, also for a call with no agent; "" with --no-cwd
	// headerCwd is the cwd the session header carries: --cwd as written
	// when it is absolute (dsh encodes it unclean: "/srv/proj/" is
	// project "--srv-proj---"), else cwd; "" with --no-cwd. cwd, cleaned,
	// is what a call mounts and runs in.
	headerCwd string
	stateDir  string
	dataDir   string
	// workspaceRoots are the directories a call's workspace must lie in
	// (--workspace-roots), absolute, clean and with links resolved; nil
	// means any directory
	// that is not a system directory.
	workspaceRoots []string
	// The daemon backends, from the command's daemonFlags: the Docker
	// engine's address ("" means $DOCKER_HOST, else the default socket)
	// and containerd's socket and namespace. daemons reports whether the
	// command takes those flags; without them it opens no daemon backend.
	daemons             bool
	dockerHost          string
	containerdAddress   string
	containerdNamespace string
	// operatorFiles are the files the operator configured this run with
	// (operatorFiles), part of protectedPaths.
	operatorFiles map[string]string
	// pool turns on the warm pool of the executors built from these
	// settings (serve and mcp: --pool); nil means none.
	pool *pool.Options
	// pull is the operator's registry configuration (--registry-auth,
	// --insecure-registries, --max-pull-bytes).
	pull *pullSettings
	log  zerolog.Logger
}

func loadSettings(c *cli.Context) (*settings, error) {
	f := newFlags(c)
	s := &settings{log: newLogger(c, f)}
	home, err := contributors.ResolveHome(f.String("home"), os.Getenv, nil)
	if err != nil {
		return nil, usageError("--home: %v", err)
	}
	if err := contributors.CheckHomes(home, f.String("skills-home")); err != nil {
		return nil, usageError("%v", err)
	}
	s.home = home
	s.sessionsRoot = filepath.Join(home, "sessions")
	if v := f.String("sessions-root"); v != "" {
		if s.sessionsRoot, err = absFlag("sessions-root", v); err != nil {
			return nil, err
		}
	}
	switch s.persistence = f.String("persistence"); s.persistence {
	case "jsonl", "sqlite":
	default:
		return nil, usageError("--persistence: %q is not one of jsonl, sqlite", s.persistence)
	}
	if s.compression, err = jsonl.ParseCompression(f.String("compression")); err != nil {
		return nil, usageError("--compression: %v", err)
	}
	s.sqlitePath = filepath.Join(home, "sessions.sqlite")
	if v := f.String("sqlite-path"); v != "" {
		if s.sqlitePath, err = absFlag("sqlite-path", v); err != nil {
			return nil, err
		}
	}
	for _, d := range []struct {
		flag string
		dst  *string
	}{{"state-dir", &s.stateDir}, {"data-dir", &s.dataDir}} {
		if *d.dst, err = absFlag(d.flag, f.String(d.flag)); err != nil {
			return nil, err
		}
	}
	if s.workspaceRoots, err = workspaceRootsFlag(f.String("workspace-roots")); err != nil {
		return nil, err
	}
	if err := s.readDaemons(c); err != nil {
		return nil, err
	}
	if err := s.readCwd(f); err != nil {
		return nil, err
	}
	if id := f.String("session-id"); f.IsSet("session-id") {
		if !utf8.ValidString(id) {
			return nil, usageError("--session-id: %q is not valid UTF-8", id)
		}
		h := session.Header{ID: id, Cwd: s.headerCwd}
		if err := h.Validate(); err != nil {
			return nil, usageError("--session-id: %v", err)
		}
		s.header = &h
	}
	if s.operatorFiles, err = operatorFiles(c); err != nil {
		return nil, err
	}
	if s.pull, err = loadPullSettings(f); err != nil {
		return nil, err
	}
	return s, nil
}

// workspaceRootsFlag is --workspace-roots (v): its colon-separated
// absolute paths, each resolved once here, so that the CLI and the
// service compare workspaces (resolved without links) with the same
// roots. Empty entries are skipped.
func workspaceRootsFlag(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var roots []string
	for _, r := range strings.Split(v, ":") {
		if r == "" {
			continue
		}
		if !filepath.IsAbs(r) {
			return nil, usageError("--workspace-roots: %q is not an absolute path", r)
		}
		abs, err := absFlag("workspace-roots", r)
		if err != nil {
			return nil, err
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		roots = append(roots, abs)
	}
	return roots, nil
}

// readCwd sets the call's working directory from --cwd (default: the
// current directory) unless --no-cwd, and the cwd a session header
// made from the flags records (--cwd as given when absolute).
func (s *settings) readCwd(f *flags) error {
	if f.Bool("no-cwd") {
		if f.IsSet("cwd") {
			return usageError("--cwd and --no-cwd exclude each other")
		}
		return nil
	}
	cwd := f.String("cwd")
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("current directory: %w", err)
		}
		cwd = wd
	}
	abs, err := absFlag("cwd", cwd)
	if err != nil {
		return err
	}
	s.cwd, s.headerCwd = abs, abs
	if filepath.IsAbs(cwd) {
		s.headerCwd = cwd
	}
	return nil
}

func absFlag(name, v string) (string, error) {
	if strings.ContainsRune(v, 0) {
		return "", usageError("--%s: contains a NUL byte", name)
	}
	abs, err := filepath.Abs(v)
	if err != nil {
		return "", usageError("--%s: %v", name, err)
	}
	return abs, nil
}

func newLogger(c *cli.Context, f *flags) zerolog.Logger {
	level, err := zerolog.ParseLevel(f.String("log-level"))
	if err != nil {
		level = zerolog.WarnLevel
	}
	var w io.Writer = c.App.ErrWriter
	if f.String("log-format") == "console" {
		w = zerolog.ConsoleWriter{Out: w, NoColor: true}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}
