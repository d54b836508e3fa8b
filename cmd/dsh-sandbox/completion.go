package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// The completion scripts ask the program itself for candidates: every
// shell runs `dsh-sandbox WORDS… --generate-bash-completion` (the CLI
// library's completion protocol, which prints the subcommands, or the
// flags when the word being completed starts with "-", and runs no
// command) and offers what it prints, one candidate a line.
const (
	bashCompletion = `# bash completion for dsh-sandbox; load it with
#   source <(dsh-sandbox completion bash)
# or install it as /etc/bash_completion.d/dsh-sandbox.
_dsh_sandbox() {
	local cur=${COMP_WORDS[COMP_CWORD]}
	local -a args=("${COMP_WORDS[@]:1:COMP_CWORD-1}")
	local w
	for w in "${args[@]}"; do
		# After -- come the call's own words: never run the program.
		if [[ $w == -- ]]; then
			COMPREPLY=()
			return
		fi
	done
	if [[ $cur == -* ]]; then
		args+=("$cur")
	fi
	local IFS=$'\n'
	COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" "${args[@]}" --generate-bash-completion 2>/dev/null)" -- "$cur"))
}
complete -o default -F _dsh_sandbox dsh-sandbox
`
	zshCompletion = `#compdef dsh-sandbox
# zsh completion for dsh-sandbox; load it with
#   source <(dsh-sandbox completion zsh)
# or install it as _dsh-sandbox in a directory of $fpath.
_dsh_sandbox() {
	local -a args out
	args=("${(@)words[2,CURRENT-1]}")
	# After -- come the call's own words: never run the program.
	if (( ${args[(Ie)--]} )); then
		_files
		return
	fi
	if [[ ${words[CURRENT]} == -* ]]; then
		args+=("${words[CURRENT]}")
	fi
	out=("${(@f)$("${words[1]}" "${args[@]}" --generate-bash-completion 2>/dev/null)}")
	out=(${out:#})
	if (( ${#out} )); then
		compadd -a out
	else
		_files
	fi
}
compdef _dsh_sandbox dsh-sandbox
`
	fishCompletion = `# fish completion for dsh-sandbox; load it with
#   dsh-sandbox completion fish | source
# or install it as ~/.config/fish/completions/dsh-sandbox.fish.
function __dsh_sandbox_complete
	set -l tokens (commandline -opc)
	set -l cur (commandline -ct)
	set -l args $tokens[2..-1]
	# After -- come the call's own words: never run the program.
	if contains -- -- $args
		__fish_complete_path $cur
		return
	end
	if string match -q -- '-*' $cur
		set args $args $cur
	end
	$tokens[1] $args --generate-bash-completion 2>/dev/null
end
complete -c dsh-sandbox -a '(__dsh_sandbox_complete)'
`
)

// completionFlag is the CLI library's completion request.
const completionFlag = "--generate-bash-completion"

// checkCompletion refuses a completion request after "--": the library
// then runs the command with the flag as one of its words, so a
// completion script that sent it would run the call being typed.
func checkCompletion(args []string) error {
	if len(args) == 0 || args[len(args)-1] != completionFlag {
		return nil
	}
	for _, a := range args {
		if a == "--" {
			return usageError("%s after --: completion runs no command", completionFlag)
		}
	}
	return nil
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script for bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: `The script completes subcommands and flags by asking dsh-sandbox itself (the hidden
--generate-bash-completion flag, which runs no command).

Examples:
   source <(dsh-sandbox completion bash)
   dsh-sandbox completion zsh > "${fpath[1]}/_dsh-sandbox"
   dsh-sandbox completion fish > ~/.config/fish/completions/dsh-sandbox.fish`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError("completion needs one shell: bash, zsh or fish")
			}
			script, ok := map[string]string{"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion}[c.Args().First()]
			if !ok {
				return usageError("completion: %q is not one of bash, zsh, fish", c.Args().First())
			}
			_, err := fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}
