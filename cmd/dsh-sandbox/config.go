package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
	"gopkg.in/yaml.v3"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
)

// maxConfigBytes bounds the --config file.
const maxConfigBytes = 1 << 20

// The --config file holds flag values for every command: the global flags
// at the top level and each command's own flags in a section named after
// it, nested for subcommands (hooks: {run: {policy: ci}}); a section may
// also set global flags for that command alone. The daemon flags
// (daemonFlags) may be set at the top level too, for every command that
// takes them. Keys are flag names (without dashes). The values reach the
// flags through the CLI library's own file source (altsrc), applied
// before the command's action, so every command reads them as it reads
// its flags. Precedence: the command line, then the environment (the
// DSH_SANDBOX_* variables of the global and the daemon flags), then the
// file, then the flag's default. The whole file is checked on
// every run: an unknown key or a value of the wrong type anywhere is a
// usage error naming the file and the key.

// ownedFlags lists, per leaf command, the global flag names the command
// defines with a meaning of its own; lookups of the global flag skip it.
// newApp builds it (addGlobalFlags) and keeps it in the app's Metadata
// under ownedFlagsKey.
type ownedFlags map[*cli.Command][]string

// ownedFlagsKey is the app's Metadata key of its ownedFlags.
const ownedFlagsKey = "ownedFlags"

// ownedFlagsOf returns app's ownedFlags; nil (none owned) for an app
// newApp did not build.
func ownedFlagsOf(app *cli.App) ownedFlags {
	if app == nil {
		return nil
	}
	owned, _ := app.Metadata[ownedFlagsKey].(ownedFlags)
	return owned
}

// global reports whether ctx's value of name is the global flag's.
func global(ctx *cli.Context, name string) bool {
	return ctx.Command == nil || !slices.Contains(ownedFlagsOf(ctx.App)[ctx.Command], name)
}

// flags reads global flags wherever they were given: on the command
// (`dsh-sandbox env show --home /h`), before it (`dsh-sandbox --home /h env
// show`), in the environment (DSH_SANDBOX_HOME), or in the --config file
// (applied to the command's own copy of the flag by applyConfig), in that
// order of precedence; else the flag's default.
type flags struct {
	c *cli.Context
}

func newFlags(c *cli.Context) *flags { return &flags{c: c} }

// IsSet reports whether name was given anywhere, the config file included.
func (f *flags) IsSet(name string) bool {
	for _, ctx := range f.c.Lineage() {
		if global(ctx, name) && ctx.IsSet(name) {
			return true
		}
	}
	return false
}

// String returns the flag's value by precedence, else its default. The
// library gives every context that defines the flag the environment's
// value, as if set there; a value that differs from it came from the
// command line (or from the file, which applyConfig only applies when
// the environment is silent), wherever in the lineage it was given.
func (f *flags) String(name string) string {
	env, fromEnv := "", false
	for _, g := range globalFlags() {
		if sf, ok := g.(*cli.StringFlag); ok && sf.Name == name {
			for _, e := range sf.EnvVars {
				if env, fromEnv = os.LookupEnv(e); fromEnv {
					break
				}
			}
		}
	}
	for _, ctx := range f.c.Lineage() {
		if global(ctx, name) && ctx.IsSet(name) && (!fromEnv || ctx.String(name) != env) {
			return ctx.String(name)
		}
	}
	if fromEnv {
		return env
	}
	// The global flag's default (a leaf may own the name with another).
	for _, g := range globalFlags() {
		if sf, ok := g.(*cli.StringFlag); ok && sf.Name == name {
			return sf.Value
		}
	}
	return ""
}

// Bool returns the flag's value by precedence, else false.
func (f *flags) Bool(name string) bool {
	for _, ctx := range f.c.Lineage() {
		if global(ctx, name) && ctx.IsSet(name) {
			return ctx.Bool(name)
		}
	}
	return false
}

// configurable wraps every flag of the leaf commands under c in its
// altsrc counterpart, which the config file can set, and installs
// applyConfig before each leaf's action.
func configurable(c *cli.Command) {
	for _, sub := range c.Subcommands {
		configurable(sub)
	}
	if len(c.Subcommands) > 0 {
		return
	}
	for i, f := range c.Flags {
		c.Flags[i] = configFlag(f)
	}
	before := c.Before
	c.Before = func(ctx *cli.Context) error {
		err := applyConfig(ctx)
		if err == nil {
			err = checkChoices(ctx)
		}
		if err == nil && before != nil {
			err = before(ctx)
		}
		return jsonError(ctx, err)
	}
	if action := c.Action; action != nil {
		c.Action = func(ctx *cli.Context) error {
			w := &countingWriter{w: ctx.App.Writer}
			ctx.App.Writer = w
			err := action(ctx)
			ctx.App.Writer = w.w
			if w.n > 0 {
				return err // the command printed its document (doctor's report, say)
			}
			return jsonError(ctx, err)
		}
	}
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// jsonError prints err as the service's error object,
// {"error":{"class","field","message"}}, on stdout when the command runs
// with --json, so that a script reads one JSON document whatever
// happened; the message goes to stderr too (main). A child's exit status
// is not an error of dsh-sandbox's and prints nothing.
func jsonError(c *cli.Context, err error) error {
	if err == nil || errors.As(err, new(*childExit)) || !c.Bool("json") {
		return err
	}
	if werr := writeJSON(c.App.Writer, types.ErrorResponse{Error: types.Body(err)}); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// noWorkspaceCommands run no call in the current directory: for them the
// current directory is not a workspace a --config file must stay out of
// (serve's calls name their own workspaces, which --workspace-roots
// bounds; a service started from $HOME keeps its config there).
var noWorkspaceCommands = []string{"serve", "calls", "jobs", "reap", "doctor", "images", "bench", "policy", "audit", "session", "replay-model", "completion"}

// configOutside are the directories a --config file may not lie in,
// compared by device and inode: the workspace of a command that runs
// calls there (--cwd, else the current directory, unless --no-cwd; a
// system directory is never one) and every
// --workspace-roots directory. They are read before the file is applied,
// so from the command line and the environment only: the file cannot
// move them.
func configOutside(f *flags, cwdIsWorkspace bool) ([]safefile.Dir, error) {
	var outside []safefile.Dir
	if cwdIsWorkspace && !f.Bool("no-cwd") {
		cwd := f.String("cwd")
		if cwd == "" {
			wd, err := os.Getwd()
			if err != nil {
				return nil, fmt.Errorf("current directory: %w", err)
			}
			cwd = wd
		}
		if cwd, err := filepath.Abs(cwd); err == nil && !hostpath.SystemDir(cwd) {
			outside = append(outside, safefile.Dir{What: "the workspace (--cwd; --no-cwd for none)", Path: cwd})
		}
	}
	for _, r := range strings.Split(f.String("workspace-roots"), ":") {
		if filepath.IsAbs(r) {
			outside = append(outside, safefile.Dir{What: "workspace root", Path: r})
		}
	}
	return outside, nil
}

// configFlag is f as a flag the config file can set; a flag of a type
// the file cannot set is returned as it is (and its key is refused).
func configFlag(f cli.Flag) cli.Flag {
	switch f := f.(type) {
	case *cli.StringFlag:
		return altsrc.NewStringFlag(f)
	case *cli.BoolFlag:
		return altsrc.NewBoolFlag(f)
	case *cli.IntFlag:
		return altsrc.NewIntFlag(f)
	case *cli.Int64Flag:
		return altsrc.NewInt64Flag(f)
	case *cli.Float64Flag:
		return altsrc.NewFloat64Flag(f)
	case *cli.DurationFlag:
		return altsrc.NewDurationFlag(f)
	case *cli.StringSliceFlag:
		return altsrc.NewStringSliceFlag(f)
	}
	return f
}

// applyConfig reads the --config file, if one is named, checks all of it
// and sets the flags of ctx's command that neither the command line nor
// the environment set: the global keys at the top level, overridden by
// those of the command's section.
func applyConfig(ctx *cli.Context) error {
	path := newFlags(ctx).String("config")
	if path == "" {
		return nil
	}
	// Opened as data: no link in its path, without blocking, a regular
	// file of bounded size (a FIFO or a device is an error at once),
	// owned by root or the invoking user, writable by nobody else and
	// outside every directory a sandboxed call may write, as it may name
	// policies, mounts and listeners (STYLE 18, as operatorPolicy).
	path0 := commandPath(ctx.App.Commands, ctx.Command)
	outside, err := configOutside(newFlags(ctx), len(path0) == 0 || !slices.Contains(noWorkspaceCommands, path0[0]))
	if err != nil {
		return err
	}
	data, err := safefile.Read(path, safefile.Options{MaxBytes: maxConfigBytes, OperatorOwned: true, Outside: outside})
	if err != nil {
		return usageError("--config: %v", err)
	}
	tree, err := parseConfig(path, data, ctx.App)
	if err != nil {
		return err
	}
	values := map[any]any{}
	for k, v := range tree {
		if _, section := v.(map[string]any); !section {
			values[k] = v
		}
	}
	section := tree
	for _, name := range commandPath(ctx.App.Commands, ctx.Command) {
		section, _ = section[name].(map[string]any)
	}
	for k, v := range section {
		values[k] = v
	}
	// A global flag given before the command name (or in the
	// environment) beats the file; the command's own copy would not see it.
	for k := range values {
		name := k.(string)
		if !global(ctx, name) {
			continue
		}
		for _, up := range ctx.Lineage()[1:] {
			if up.IsSet(name) {
				delete(values, k)
				break
			}
		}
	}
	if err := altsrc.ApplyInputSourceValues(ctx, altsrc.NewMapInputSource(path, values), ctx.Command.Flags); err != nil {
		return usageError("--config: %s: %v", path, err)
	}
	return nil
}

// commandPath is the names from the top-level command down to c.
func commandPath(cmds []*cli.Command, c *cli.Command) []string {
	for _, cmd := range cmds {
		if cmd == c {
			return []string{cmd.Name}
		}
		if p := commandPath(cmd.Subcommands, c); p != nil {
			return append([]string{cmd.Name}, p...)
		}
	}
	return nil
}

// parseConfig decodes a config file and checks every key and value
// against app's flags and commands, returning the tree with values in
// the form the flags take (a number for a float flag, a list for a
// repeatable flag). Errors are usage errors naming path and every bad key.
func parseConfig(path string, data []byte, app *cli.App) (map[string]any, error) {
	var tree map[string]any
	if err := yaml.Unmarshal(data, &tree); err != nil {
		return nil, usageError("--config: %s: not valid YAML or JSON: %v", path, err)
	}
	var problems []string
	// The top level holds the global flags, and the daemon flags for
	// every command that takes them.
	var globals []cli.Flag
	for _, f := range append(globalFlags(), daemonFlags()...) {
		globals = append(globals, configFlag(f))
	}
	checkSection(tree, "", globals, app.Commands, nil, ownedFlagsOf(app), &problems)
	if len(problems) > 0 {
		return nil, usageError("--config: %s: %s", path, strings.Join(problems, "; "))
	}
	return tree, nil
}

// checkSection checks the keys of one section: flag names (with a value
// of the flag's type) and sections of the commands cmds. owned are the
// global flag names a leaf defines itself (its "config" is its own), all
// those of every command.
func checkSection(sec map[string]any, where string, fls []cli.Flag, cmds []*cli.Command, owned []string, all ownedFlags, problems *[]string) {
	byName := map[string]cli.Flag{}
	for _, f := range fls {
		name := f.Names()[0]
		if name != "config" || slices.Contains(owned, name) {
			byName[name] = f
		}
	}
	subs := map[string]*cli.Command{}
	for _, c := range cmds {
		if c.Name != "help" {
			subs[c.Name] = c
		}
	}
	for _, k := range slices.Sorted(maps.Keys(sec)) {
		key := k
		if where != "" {
			key = where + "." + k
		}
		if f, ok := byName[k]; ok {
			v, why := configValue(f, sec[k])
			if why != "" {
				*problems = append(*problems, fmt.Sprintf("%s %s", key, why))
				continue
			}
			sec[k] = v
			continue
		}
		c, ok := subs[k]
		if !ok {
			*problems = append(*problems, fmt.Sprintf("unknown key %q (%s)", key, wantKeys(where, byName, subs)))
			continue
		}
		m, ok := sec[k].(map[string]any)
		if !ok {
			*problems = append(*problems, fmt.Sprintf("%s is %s; want a mapping: the section of command `%s` (a command's flags go in its section, e.g. exec: {policy: read-only})", key, yamlKind(sec[k]), strings.ReplaceAll(key, ".", " ")))
			continue
		}
		// The library gives a leaf a "help" subcommand when it runs.
		var cfls []cli.Flag
		subcmds := slices.DeleteFunc(slices.Clone(c.Subcommands), func(s *cli.Command) bool { return s.Name == "help" })
		if len(subcmds) == 0 {
			cfls = c.Flags
		}
		checkSection(m, key, cfls, subcmds, all[c], all, problems)
	}
}

// wantKeys says what a section may hold, for an unknown key.
func wantKeys(where string, fls map[string]cli.Flag, subs map[string]*cli.Command) string {
	switch {
	case where == "":
		return "keys are global flag names and command sections such as exec: or serve:"
	case len(subs) > 0:
		return "want a subcommand: " + strings.Join(slices.Sorted(maps.Keys(subs)), ", ")
	default:
		return "want a flag of `" + strings.ReplaceAll(where, ".", " ") + "`"
	}
}

// configValue returns v in the form flag f (a configFlag) reads, or why
// v is not a value of f's type. Values themselves never appear in the
// reason.
func configValue(f cli.Flag, v any) (any, string) {
	kind := yamlKind(v)
	switch f.(type) {
	case *altsrc.StringFlag:
		if _, ok := v.(string); ok {
			return v, ""
		}
		return nil, "is " + kind + "; want a string (quote it)"
	case *altsrc.BoolFlag:
		if _, ok := v.(bool); ok {
			return v, ""
		}
		return nil, "is " + kind + "; want true or false"
	case *altsrc.IntFlag, *altsrc.Int64Flag:
		if _, ok := v.(int); ok {
			return v, ""
		}
		return nil, "is " + kind + "; want an integer"
	case *altsrc.Float64Flag:
		switch n := v.(type) {
		case int:
			return float64(n), ""
		case float64:
			return n, ""
		}
		return nil, "is " + kind + "; want a number"
	case *altsrc.DurationFlag:
		if n, ok := v.(int); ok && n == 0 {
			return "0s", ""
		}
		if s, ok := v.(string); ok {
			if _, err := time.ParseDuration(s); err == nil {
				return s, ""
			}
		}
		return nil, "is " + kind + "; want a duration such as 30s or 1h"
	case *altsrc.StringSliceFlag:
		if _, ok := v.(string); ok {
			return []any{v}, ""
		}
		if l, ok := v.([]any); ok && !slices.ContainsFunc(l, func(e any) bool { _, ok := e.(string); return !ok }) {
			return l, ""
		}
		return nil, "is " + kind + "; want a string or a list of strings"
	}
	return nil, "cannot be set in the config file"
}

// yamlKind names the kind of a decoded YAML value without quoting it.
func yamlKind(v any) string {
	switch v.(type) {
	case nil:
		return "empty (null)"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int:
		return "an integer"
	case float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("a %T", v)
}

// choiceFlags are the flags that take one of a fixed set of values, and
// those values. Any other value, from the command line, the environment
// or the config file, is a usage error naming the flag: a setting that
// silently does nothing is worse than none.
var choiceFlags = []struct {
	name   string
	values []string
}{
	{"log-level", []string{"debug", "info", "warn", "error"}},
	{"log-format", []string{"json", "console"}},
	{"persistence", []string{"jsonl", "sqlite"}},
	{"compression", []string{"zstd", "none"}},
	{"dialect", []string{"claude-code", "codex"}},
	{"source", []string{"startup", "resume", "clear", "compact"}},
}

// checkChoices refuses a value of a choice flag that is not one of its
// values (exit 2).
func checkChoices(c *cli.Context) error {
	f := newFlags(c)
	for _, cf := range choiceFlags {
		if !f.IsSet(cf.name) {
			continue
		}
		if v := f.String(cf.name); !slices.Contains(cf.values, v) {
			return usageError("--%s: %q is not one of %s", cf.name, v, strings.Join(cf.values, ", "))
		}
	}
	return nil
}
