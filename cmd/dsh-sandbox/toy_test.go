package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// toyExecutor is the executor of a backend kept in this test: it runs
// nothing, answers every call with exit 0 and "toy ran", records the
// requests, and has one leftover container for Reap to find.
type toyExecutor struct {
	mu      sync.Mutex
	reqs    []*sandbox.Request
	reaped  bool
	closed  bool
	backend *toyBackend
}

func (e *toyExecutor) Run(_ context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reqs = append(e.reqs, req)
	zero := 0
	return &sandbox.Result{ExitCode: &zero, Stdout: sandbox.Stream{Text: "toy ran"}, Sandbox: sandbox.Info{Backend: string(toyName)}}, nil
}

func (e *toyExecutor) Reap(context.Context) (reap.Report, error) {
	e.backend.mu.Lock()
	defer e.backend.mu.Unlock()
	e.backend.reaps++
	return reap.Report{Instances: []string{"i-dead"}, Containers: []string{"toy-1"}}, nil
}

func (e *toyExecutor) Close() error {
	e.backend.mu.Lock()
	defer e.backend.mu.Unlock()
	e.backend.closes++
	return nil
}

const toyName = sandbox.Backend("toy")

// toyBackend counts what the CLI did with the toy backend's executors.
type toyBackend struct {
	mu             sync.Mutex
	opened         []*toyExecutor
	reaps, closes  int
	doctorStateDir string
}

func (b *toyBackend) descriptor() backend.Descriptor {
	return backend.Descriptor{
		Name: toyName,
		Open: func(_ context.Context, cfg backend.Config, _ sandbox.Runtime) (sandbox.Executor, error) {
			b.mu.Lock()
			defer b.mu.Unlock()
			ex := &toyExecutor{backend: b}
			b.opened = append(b.opened, ex)
			return ex, nil
		},
		Reaps: true,
		Doctor: func(_ context.Context, cfg backend.Config, _ sandbox.Runtime) []doctor.Check {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.doctorStateDir = cfg.StateDir
			return []doctor.Check{{Name: "toy", OK: true, Detail: "always usable"}}
		},
	}
}

// registerToy adds the toy backend to the CLI's registry for the test:
// the one line a new backend adds to builtins.go, which also makes its
// name one a policy file may name (operatorPolicy). The cleanup takes it
// back, for the tests that compare the registry with the built-ins.
func registerToy(t *testing.T) *toyBackend {
	t.Helper()
	b := &toyBackend{}
	backends.Register(b.descriptor())
	t.Cleanup(func() { backends.Unregister(toyName) })
	f := filepath.Join(t.TempDir(), "toy.yaml")
	if err := os.WriteFile(f, []byte("backend: toy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := (&settings{}).operatorPolicy("policy", f, false); err != nil || p.Backend != toyName {
		t.Fatalf("registering %q did not make it a backend a policy may name: %v", toyName, err)
	}
	return b
}

// TestToyBackendThroughCLI: a backend registered in one place is what
// exec, reap and doctor use, found by name; nothing else in the CLI
// knows it.
func TestToyBackendThroughCLI(t *testing.T) {
	toy := registerToy(t)
	tmp, work := t.TempDir(), t.TempDir()
	global := []string{"--home", filepath.Join(tmp, "home"), "--state-dir", filepath.Join(tmp, "state"), "--data-dir", filepath.Join(tmp, "data")}

	// exec --backend toy runs the call on the toy's executor, after
	// reaping what a dead instance left, and closes it.
	args := append([]string{"exec"}, global...)
	out, errOut, code := run(t, append(args, "--json", "--backend", "toy", "--cwd", work, "--session-id", "s1", "--", "echo hi")...)
	var res sandbox.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Stdout.Text != "toy ran" {
		t.Fatalf("exec --backend toy = %d, %q (%s); want 0 and the toy's result", code, out, errOut)
	}
	if len(toy.opened) != 1 || len(toy.opened[0].reqs) != 1 || toy.reaps != 1 || toy.closes != 1 {
		t.Fatalf("exec opened %d toy executors (reaped %d, closed %d); want one that ran one call, reaped and closed", len(toy.opened), toy.reaps, toy.closes)
	}
	req := toy.opened[0].reqs[0]
	if req.Policy.Backend != toyName || req.Command != "echo hi" || req.Session.ID != "s1" || req.Session.Cwd != work || !req.Session.Owner.Set {
		t.Errorf("the toy got policy backend %q, command %q, session %+v; want toy, echo hi, s1 in %s with an owner", req.Policy.Backend, req.Command, req.Session, work)
	}

	// reap --backend toy lists the toy's report in the one JSON shape.
	out, errOut, code = run(t, append(append([]string{"reap"}, global...), "--backend", "toy", "--json")...)
	var results []struct {
		Backend string      `json:"backend"`
		Removed int         `json:"removed"`
		Report  reap.Report `json:"report"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &results) != nil || len(results) != 1 {
		t.Fatalf("reap --backend toy --json = %d, %q (%s); want one result", code, out, errOut)
	}
	if r := results[0]; r.Backend != "toy" || r.Removed != 1 || !slices.Equal(r.Report.Containers, []string{"toy-1"}) || !slices.Equal(r.Report.Instances, []string{"i-dead"}) {
		t.Errorf("reap --backend toy = %+v; want toy removing container toy-1 of i-dead", r)
	}
	out, _, code = run(t, append(append([]string{"reap"}, global...), "--backend", "toy")...)
	if code != 0 || !strings.Contains(out, "toy: removed 1 objects: 1 containers; 1 dead instances") {
		t.Errorf("reap --backend toy = %d, %q; want the toy's report in words", code, out)
	}
	// Without the registry line the name is unknown, and the message
	// lists the registered backends.
	_, errOut, code = run(t, append(append([]string{"reap"}, global...), "--backend", "toyx")...)
	if code != 2 || !strings.Contains(errOut, "toy") || !strings.Contains(errOut, "oci") {
		t.Errorf("reap --backend toyx = %d, %q; want a usage error listing oci ... toy", code, errOut)
	}

	// doctor reports the toy next to the built-in backends.
	out, errOut, _ = run(t, append(append([]string{"doctor"}, global...), "--json",
		"--docker-host", "unix://"+filepath.Join(tmp, "no-docker.sock"), "--containerd-address", filepath.Join(tmp, "no-containerd.sock"))...)
	var reports []struct {
		Backend string `json:"backend"`
		Usable  bool   `json:"usable"`
	}
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatalf("doctor --json = %q (%s): %v", out, errOut, err)
	}
	var names []string
	for _, r := range reports {
		names = append(names, r.Backend)
		if r.Backend == "toy" && !r.Usable {
			t.Errorf("doctor: toy not usable: %s", out)
		}
	}
	if !slices.Contains(names, "toy") || names[0] != "oci" || toy.doctorStateDir != filepath.Join(tmp, "state") {
		t.Errorf("doctor reported %q (the toy's doctor saw state dir %q); want oci first and toy among them, on %s/state", names, toy.doctorStateDir, tmp)
	}
}
