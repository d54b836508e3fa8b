package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// commandLines are the leaf commands whose words after the first
// positional argument belong to the command they run, never to
// dsh-sandbox: their arguments are left as written.
var commandLines = []string{"exec"}

// flagsFirst returns args with the flags a user wrote after a leaf
// command's positional arguments moved before them, so that
// `policy check FILE --session-id s` parses as
// `policy check --session-id s FILE` (the flag library stops at the first
// positional argument). A word that names no flag of the command stays
// where it is, and so does everything after "--" and every argument of a
// command that runs a command line (exec).
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out, leaf, i := leafCommand(app, args)
	if leaf == nil {
		return args
	}
	for _, name := range commandLines {
		if leaf.Name == name {
			return args
		}
	}
	flagWords, positional := splitFlags(leaf, args[i:])
	return append(append(out, flagWords...), positional...)
}

// leafCommand walks args (the program name, then global and command
// flags and command names) down to the command without subcommands
// they name: it returns the words that lead there, the command, and the
// index in args of the first word after its name. The command is nil when
// args name none ("--" or a word that is no command comes first).
func leafCommand(app *cli.App, args []string) ([]string, *cli.Command, int) {
	out := []string{args[0]}
	cmds, fl := app.Commands, app.Flags
	i := 1
	for i < len(args) {
		a := args[i]
		if a == "--" {
			return nil, nil, 0
		}
		if isFlagWord(a) {
			out = append(out, a)
			i++
			if takesValue(fl, a) && i < len(args) {
				out = append(out, args[i])
				i++
			}
			continue
		}
		var cmd *cli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				cmd = c
			}
		}
		if cmd == nil {
			return nil, nil, 0
		}
		out = append(out, a)
		i++
		if len(cmd.Subcommands) == 0 {
			return out, cmd, i
		}
		cmds, fl = cmd.Subcommands, cmd.Flags
	}
	return nil, nil, 0
}

// splitFlags splits args, the words after command leaf's name, into its
// flags (with their values) and the rest, each in their order; from "--"
// on everything is the rest.
func splitFlags(leaf *cli.Command, args []string) (flagWords, positional []string) {
	for j := 0; j < len(args); j++ {
		a := args[j]
		if a == "--" {
			positional = append(positional, args[j:]...)
			break
		}
		if !isFlagWord(a) || !(knownFlag(leaf.Flags, a) || isHelp(a)) {
			positional = append(positional, a)
			continue
		}
		flagWords = append(flagWords, a)
		if takesValue(leaf.Flags, a) && j+1 < len(args) {
			j++
			flagWords = append(flagWords, args[j])
		}
	}
	return flagWords, positional
}

func isFlagWord(a string) bool { return len(a) > 1 && a[0] == '-' }

func isHelp(a string) bool { return a == "-h" || a == "--help" }

// flagName is the name in a flag word: "--name=v" and "-n" give "name", "n".
func flagName(a string) string {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	return name
}

func lookupFlag(fl []cli.Flag, a string) cli.Flag {
	name := flagName(a)
	for _, f := range fl {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func knownFlag(fl []cli.Flag, a string) bool { return lookupFlag(fl, a) != nil }

// takesValue reports whether flag word a is a flag of fl that takes its
// value from the next word: not a boolean flag, not written name=value.
func takesValue(fl []cli.Flag, a string) bool {
	f := lookupFlag(fl, a)
	if f == nil || strings.Contains(a, "=") {
		return false
	}
	v, ok := f.(interface{ TakesValue() bool }) // altsrc's flags embed the library's
	return !ok || v.TakesValue()
}

// unknownCommand is the action of the app and of every command group: a
// word that names none of the commands is a usage error that suggests the
// closest; no word shows the help.
func unknownCommand(cmds func() []*cli.Command) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 {
			return cli.ShowSubcommandHelp(c)
		}
		name := c.Args().First()
		hint := ""
		if cli.SuggestCommand != nil {
			hint = " " + cli.SuggestCommand(cmds(), name)
		}
		return usageError("%q is not a command.%s (--help lists them)", name, hint)
	}
}
