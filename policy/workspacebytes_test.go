package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestWorkspaceBytes: limits.workspaceBytes parses as a size, survives
// Format, and is refused (naming the field) when negative, on a
// read-only workspace or on the local backend.
func TestWorkspaceBytes(t *testing.T) {
	p, err := Parse([]byte("name: q\nworkspace: rw\nlimits: {workspaceBytes: 2Gi}\n"))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if p.Limits.WorkspaceBytes != 2<<30 {
		t.Errorf("workspaceBytes = %d, want 2Gi", p.Limits.WorkspaceBytes)
	}
	out, err := Format(p)
	if err != nil || !strings.Contains(string(out), `"workspaceBytes": "2Gi"`) {
		t.Errorf("Format = %s, %v; want workspaceBytes 2Gi", out, err)
	}
	if again, err := Parse(out); err != nil || again.Digest != p.Digest {
		t.Errorf("Parse(Format) = %v, digest %s; want %s", err, again.Digest, p.Digest)
	}
	if !strings.Contains(Explain(p), "workspace size: the workspace holds at most 2Gi") {
		t.Errorf("Explain does not say the bound:\n%s", Explain(p))
	}
	for _, doc := range []string{
		"name: q\nworkspace: rw\nlimits: {workspaceBytes: -1}\n",
		"name: q\nworkspace: ro\nlimits: {workspaceBytes: 1Gi}\n",
		"name: q\nbackend: local\nworkspace: rw\nlimits: {workspaceBytes: 1Gi}\n",
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "limits.workspaceBytes") {
			t.Errorf("Parse(%q) = %v, want a refusal naming limits.workspaceBytes", doc, err)
		}
	}
}

// TestNarrowWorkspaceBytes: a call may set or lower the bound, never
// raise it past the policy's, and not where the policy cannot bound the
// workspace.
func TestNarrowWorkspaceBytes(t *testing.T) {
	ww := builtin(t, WorkspaceWrite)
	q, err := Narrow(ww, Narrowing{WorkspaceBytes: 1 << 20})
	if err != nil || q.Limits.WorkspaceBytes != 1<<20 {
		t.Fatalf("Narrow(workspace-write, 1Mi) = %d, %v; want 1Mi", q.Limits.WorkspaceBytes, err)
	}
	if r, err := Narrow(q, Narrowing{WorkspaceBytes: 512 << 10}); err != nil || r.Limits.WorkspaceBytes != 512<<10 {
		t.Errorf("Narrow(1Mi policy, 512Ki) = %d, %v; want 512Ki", r.Limits.WorkspaceBytes, err)
	}
	var ne *NarrowError
	if _, err := Narrow(q, Narrowing{WorkspaceBytes: 2 << 20}); !errors.As(err, &ne) || ne.Field != "workspaceBytes" || !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Narrow(1Mi policy, 2Mi) = %v, want a refusal of workspaceBytes", err)
	}
	if _, err := Narrow(builtin(t, ReadOnly), Narrowing{WorkspaceBytes: 1 << 20}); !errors.As(err, &ne) || ne.Field != "workspaceBytes" {
		t.Errorf("Narrow(read-only, 1Mi) = %v, want a refusal of workspaceBytes", err)
	}
}

// TestWarningsWorkspaceBytes: policy check says when the workspace's
// file system cannot enforce the bound (a test's temporary directory has
// no project quotas), and says nothing without the bound.
func TestWarningsWorkspaceBytes(t *testing.T) {
	ws := t.TempDir()
	p := builtin(t, WorkspaceWrite)
	s := sandbox.Session{Cwd: ws}
	for _, w := range Warnings(p, s, 0, 0) {
		if strings.Contains(w, "workspaceBytes") {
			t.Errorf("without the bound: warning %q", w)
		}
	}
	p.Limits.WorkspaceBytes = 1 << 20
	found := false
	for _, w := range Warnings(p, s, 0, 0) {
		found = found || strings.Contains(w, "limits.workspaceBytes cannot be enforced on the workspace")
	}
	if !found {
		t.Errorf("Warnings(%s with workspaceBytes) = %q, want one saying the bound cannot be enforced", ws, Warnings(p, s, 0, 0))
	}
}
