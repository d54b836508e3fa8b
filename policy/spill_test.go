package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestSpillLimits(t *testing.T) {
	p, err := Parse([]byte("limits: {spillTotalBytes: 32Mi, spillRetention: 90m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Limits.SpillTotalBytes != 32<<20 || p.Limits.SpillRetentionMs != 90*60*1000 {
		t.Errorf("Parse: spillTotalBytes %d, spillRetentionMs %d; want %d, %d", p.Limits.SpillTotalBytes, p.Limits.SpillRetentionMs, 32<<20, 90*60*1000)
	}
	out, err := Format(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse(out)
	if err != nil || q.Digest != p.Digest {
		t.Errorf("Parse(Format(p)) = %v (digest %s), want digest %s", err, q.Digest, p.Digest)
	}
	// Absent keys keep the digest of a policy without them (0 = default).
	d, err := Parse([]byte("{}"))
	if err != nil || d.Limits.SpillTotalBytes != 0 || d.Limits.SpillRetentionMs != 0 {
		t.Errorf("Parse({}) limits = %+v, %v; want spill totals unset", d.Limits, err)
	}
	for _, tt := range []struct{ doc, field string }{
		{"limits: {spillTotalBytes: 0}", "limits.spillTotalBytes"},
		{"limits: {spillTotalBytes: lots}", "limits.spillTotalBytes"},
		{"limits: {spillRetention: 1x}", "limits.spillRetention"},
		{"limits: {spillRetention: -1h}", "limits.spillRetention"},
		{"limits: {spillRetention: 9000h}", "limits.spillRetention"},
	} {
		if _, err := Parse([]byte(tt.doc)); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("Parse(%q) = %v, want an invalid-argument error naming %s", tt.doc, err, tt.field)
		}
	}
}

func TestResolveUserNoFollow(t *testing.T) {
	tmp := t.TempDir()
	ws, wsUID, wsGID := ownedDir(t, tmp, "ws", 0o755, 4242, 4343)
	link := filepath.Join(tmp, "link")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	auto := builtin(t, WorkspaceWrite)
	// The legitimate workspace gives its owner.
	if uid, gid, err := ResolveUser(auto, sandbox.Session{Cwd: ws}); err != nil || uid != wsUID || gid != wsGID {
		t.Errorf("ResolveUser(ws) = %d:%d, %v, want %d:%d", uid, gid, err, wsUID, wsGID)
	}
	// A mounted cwd that is a link (to /, owned by root) is refused, not
	// followed to uid 0.
	for _, s := range []sandbox.Session{{Cwd: link}, {Cwd: link + "/tmp"}, {TranscriptDir: link + "/tmp/s"}} {
		uid, gid, err := ResolveUser(auto, s)
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("ResolveUser(%+v) = %d:%d, %v, want an invalid-argument error about the link", s, uid, gid, err)
		}
	}
	// An unmounted cwd behind a link is skipped, never a source of
	// identity.
	none := auto
	none.Workspace = "none"
	if uid, _, err := ResolveUser(none, sandbox.Session{Cwd: link}); err != nil || uid == 0 {
		t.Errorf("ResolveUser(workspace none, link cwd) = %d, %v, want nobody", uid, err)
	}
}
