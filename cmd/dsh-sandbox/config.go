package main

import (
	"slices"
	"strconv"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
)

// maxConfigBytes bounds the --config file.
const maxConfigBytes = 1 << 20

// ownedFlags lists, per leaf command, the global flag names the command
// defines with a meaning of its own; lookups of the global flag skip it.
var ownedFlags = map[*cli.Command][]string{}

// global reports whether ctx's value of name is the global flag's.
func global(ctx *cli.Context, name string) bool {
	return ctx.Command == nil || !slices.Contains(ownedFlags[ctx.Command], name)
}

// flags reads global flags wherever they were given: on the command
// (`dsh-sandbox env show --home /h`), before it (`dsh-sandbox --home /h env
// show`), in the environment (DSH_SANDBOX_HOME), or in the --config file,
// in that order of precedence; else the flag's default.
type flags struct {
	c      *cli.Context
	config map[string]string
}

func newFlags(c *cli.Context) (*flags, error) {
	f := &flags{c: c}
	path := f.String("config")
	if path == "" {
		return f, nil
	}
	// Opened as data: no link in its path, without blocking, a regular
	// file of bounded size (a FIFO or a device is an error at once).
	data, err := safefile.Read(path, safefile.Options{MaxBytes: maxConfigBytes})
	if err != nil {
		return nil, usageError("--config: %v", err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		return nil, usageError("--config: %s: %v", path, err)
	}
	known := map[string]bool{}
	for _, fl := range globalFlags() {
		known[fl.Names()[0]] = true
	}
	f.config = map[string]string{}
	for k, v := range values {
		if !known[k] || k == "config" {
			return nil, usageError("--config: %s: unknown key %q (keys are global flag names)", path, k)
		}
		switch v := v.(type) {
		case string:
			f.config[k] = v
		case bool:
			f.config[k] = strconv.FormatBool(v)
		default:
			return nil, usageError("--config: %s: key %q must be a string or a boolean, got %v", path, k, v)
		}
	}
	return f, nil
}

// IsSet reports whether name was given anywhere, the config file included.
func (f *flags) IsSet(name string) bool {
	for _, ctx := range f.c.Lineage() {
		if global(ctx, name) && ctx.IsSet(name) {
			return true
		}
	}
	_, ok := f.config[name]
	return ok
}

// String returns the flag's value by precedence, else its default.
func (f *flags) String(name string) string {
	for _, ctx := range f.c.Lineage() {
		if global(ctx, name) && ctx.IsSet(name) {
			return ctx.String(name)
		}
	}
	if v, ok := f.config[name]; ok {
		return v
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
	if v, ok := f.config[name]; ok {
		b, _ := strconv.ParseBool(v)
		return b
	}
	return false
}
