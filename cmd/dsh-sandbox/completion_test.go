package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompletionScriptsCase(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "complete -o default -F _dsh_sandbox dsh-sandbox",
		"zsh":  "compdef _dsh_sandbox dsh-sandbox",
		"fish": "complete -c dsh-sandbox",
	} {
		out, errOut, code := run(t, "completion", shell)
		if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, completionFlag) {
			t.Errorf("completion %s: exit %d (%q); output lacks %q: %s", shell, code, errOut, want, out)
		}
	}
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		if _, errOut, code := run(t, args...); code != 2 || !strings.Contains(errOut, "bash, zsh") {
			t.Errorf("%v: exit %d (%q), want 2 naming the shells", args, code, errOut)
		}
	}
}

func TestCompletionBashScriptParses(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is missing: cannot check the script's syntax")
	}
	out, _, _ := run(t, "completion", "bash")
	f := filepath.Join(t.TempDir(), "c.bash")
	if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(bash, "-n", f).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v: %s", err, msg)
	}
}

// The completion protocol itself reads os.Args (a quirk of the CLI
// library), so it is tested with the built binary in
// integration/ops_test.go (TestCompletionBashEndToEnd).
func TestCompletionAfterDashDashRunsNothing(t *testing.T) {
	// The library would run the command with the flag as a word; main
	// refuses first. The legitimate variants pass.
	if err := checkCompletion([]string{"dsh-sandbox", "exec", "--", "touch x", completionFlag}); exitCode(err) != 2 {
		t.Errorf("completion after --: %v, want a usage error", err)
	}
	for _, args := range [][]string{
		{"dsh-sandbox", "exec", "--ti", completionFlag},
		{"dsh-sandbox", "exec", "--", "echo", completionFlag, "x"},
		{"dsh-sandbox"},
	} {
		if err := checkCompletion(args); err != nil {
			t.Errorf("%v: %v, want accepted", args, err)
		}
	}
}
