package sandboxtest

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// mountCases check what a call sees of the host: its transcript directory
// read-only and live, no other session, the workspace per policy, and
// the policy's extra mounts and tmpfs.
func mountCases() []testCase {
	return []testCase{
		{name: "transcript-readable", run: testTranscriptReadable},
		{name: "transcript-readonly", isolated: true, run: testTranscriptReadonly},
		{name: "transcript-live-append", run: testTranscriptLiveAppend},
		{name: "transcript-dir-created", isolated: true, run: testTranscriptDirCreated},
		{name: "sessions-other-invisible", isolated: true, run: testSessionsOtherInvisible},
		{name: "workspace-rw", run: testWorkspaceRW},
		{name: "workspace-ro", isolated: true, run: testWorkspaceRO},
		{name: "workspace-none", isolated: true, run: testWorkspaceNone},
		{name: "policy-mount-ro", isolated: true, run: testPolicyMountRO},
		{name: "policy-mount-rw", isolated: true, run: testPolicyMountRW},
		{name: "policy-tmpfs", isolated: true, run: testPolicyTmpfs},
	}
}

// testTranscriptReadable: the call reads its transcript at the path
// DSH_SESSION_JSONL names.
func testTranscriptReadable(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, `cat "$DSH_SESSION_JSONL"`)
	req.Policy.Transcript = "ro"
	res := s.runOK(t, req)
	if res.Stdout.Text != string(fx.Header) {
		t.Errorf("cat $DSH_SESSION_JSONL = %q, want the header line %q", res.Stdout.Text, fx.Header)
	}
}

// testTranscriptReadonly: the transcript and its directory cannot be
// changed from inside.
func testTranscriptReadonly(t *testing.T, s *suite) {
	fx := newFixture(t)
	newFile := filepath.Join(fx.TranscriptDir, "planted")
	req := s.request(fx, `echo tampered >> "$DSH_SESSION_JSONL" 2>/dev/null && echo WROTE-FILE
: > "$DSH_SESSION_JSONL" 2>/dev/null && echo TRUNCATED
touch `+shellQuote(newFile)+` 2>/dev/null && echo WROTE-DIR
chmod 0666 "$DSH_SESSION_JSONL" 2>/dev/null && echo CHMOD
rm -f "$DSH_SESSION_JSONL" 2>/dev/null
mv "$DSH_SESSION_JSONL" "$DSH_SESSION_JSONL.moved" 2>/dev/null && echo MOVED
echo done`)
	req.Policy.Transcript = "ro"
	res := s.runOK(t, req)
	if got := strings.TrimSpace(res.Stdout.Text); got != "done" {
		t.Errorf("writes to the transcript directory reported %q, want only %q", got, "done")
	}
	got, err := os.ReadFile(fx.JSONL)
	if err != nil || !bytes.Equal(got, fx.Header) {
		t.Errorf("transcript after the call = %q (err %v), want it unchanged %q", got, err, fx.Header)
	}
	if fi, err := os.Stat(fx.JSONL); err == nil && fi.Mode().Perm() != 0o600 {
		t.Errorf("transcript mode after the call = %v, want 0600", fi.Mode().Perm())
	}
	if _, err := os.Stat(newFile); err == nil {
		t.Errorf("the call created %s in the transcript directory", newFile)
	}
}

// testTranscriptLiveAppend: lines the host appends after the call
// started are visible inside while it runs (a bind mount, not a copy).
func testTranscriptLiveAppend(t *testing.T, s *suite) {
	fx := newFixture(t)
	mark := "sandboxtest-appended-" + randomHex(4)
	line := eventLine(0, mark)
	appendErr := make(chan error, 1)
	req := s.request(fx, `echo ready
i=0
while ! grep -q `+mark+` "$DSH_SESSION_JSONL"; do
  i=$((i+1))
  if [ $i -gt 600 ]; then echo gave-up; exit 3; fi
  sleep 0.1
done
echo seen
tail -n 1 "$DSH_SESSION_JSONL"`)
	req.Policy.Transcript = "ro"
	req.Stdout = newWatchWriter("ready", func() {
		f, err := os.OpenFile(fx.JSONL, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.Write(line)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		appendErr <- err
	})
	res := s.run(t, req)
	select {
	case err := <-appendErr:
		if err != nil {
			t.Fatalf("append to the transcript on the host: %v", err)
		}
	default:
		t.Fatalf("the call never printed %q, so the host never appended: %s", "ready", describe(res))
	}
	wantExit(t, req, res, 0)
	if want := "ready\nseen\n" + string(line); res.Stdout.Text != want {
		t.Errorf("stdout = %q, want %q", res.Stdout.Text, want)
	}
}

// testTranscriptDirCreated: a missing session directory is created 0700
// on the host and mounted.
func testTranscriptDirCreated(t *testing.T, s *suite) {
	fx := newFixture(t)
	if err := os.RemoveAll(fx.TranscriptDir); err != nil {
		t.Fatal(err)
	}
	req := s.request(fx, "test -d "+shellQuote(fx.TranscriptDir)+" && echo present")
	req.Policy.Transcript = "ro"
	res := s.runOK(t, req)
	if res.Stdout.Text != "present\n" {
		t.Errorf("stdout = %q, want the session directory present inside", res.Stdout.Text)
	}
	fi, err := os.Stat(fx.TranscriptDir)
	if err != nil {
		t.Fatalf("session directory after the call: %v", err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("session directory mode = %v, want a directory with 0700", fi.Mode())
	}
}

// testSessionsOtherInvisible: only the session's own directory is
// mounted: its project directory and the sessions root show nothing else
// and other sessions' transcripts cannot be read.
func testSessionsOtherInvisible(t *testing.T, s *suite) {
	fx := newFixture(t)
	sibling, err := layoutSession(fx.SessionsRoot, fx.Workspace, "sandboxtest-sibling")
	if err != nil {
		t.Fatal(err)
	}
	otherProject, err := layoutSession(fx.SessionsRoot, "/sandboxtest/other/project", "sandboxtest-other")
	if err != nil {
		t.Fatal(err)
	}
	req := s.request(fx, listDir(fx.ProjectDir)+"; echo ---; "+listDir(fx.SessionsRoot)+"; echo ---\n"+
		"cat "+shellQuote(sibling.File)+" 2>/dev/null && echo LEAK-SIBLING\n"+
		"cat "+shellQuote(otherProject.File)+" 2>/dev/null && echo LEAK-OTHER\n"+
		"echo end")
	req.Policy.Transcript = "ro"
	res := s.runOK(t, req)
	parts := strings.Split(res.Stdout.Text, "---\n")
	if len(parts) != 3 {
		t.Fatalf("stdout = %q, want three parts", res.Stdout.Text)
	}
	if got, want := lines(parts[0]), []string{filepath.Base(fx.TranscriptDir)}; !slices.Equal(got, want) {
		t.Errorf("project directory lists %q inside, want only this session %q", got, want)
	}
	if got, want := lines(parts[1]), []string{filepath.Base(fx.ProjectDir)}; !slices.Equal(got, want) {
		t.Errorf("sessions root lists %q inside, want only this project %q", got, want)
	}
	if parts[2] != "end\n" {
		t.Errorf("reading other sessions' transcripts printed %q, want only %q", parts[2], "end\n")
	}
}

// ownerUID is the owner of path on the host.
func ownerUID(t *testing.T, path string) uint32 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatalf("stat %s: no owner information on this platform", path)
	}
	return st.Uid
}

// testWorkspaceRW: with workspace rw the call reads and changes the
// session cwd, and its files belong to the workspace's owner.
func testWorkspaceRW(t *testing.T, s *suite) {
	fx := newFixture(t)
	if err := os.WriteFile(filepath.Join(fx.Workspace, "host.txt"), []byte("from-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := s.request(fx, "cat host.txt; echo from-sandbox > created.txt; mkdir -p made/dir")
	req.Policy.Workspace = "rw"
	res := s.runOK(t, req)
	if res.Stdout.Text != "from-host\n" {
		t.Errorf("cat host.txt = %q, want %q", res.Stdout.Text, "from-host\n")
	}
	created := filepath.Join(fx.Workspace, "created.txt")
	if got, err := os.ReadFile(created); err != nil || string(got) != "from-sandbox\n" {
		t.Fatalf("created.txt on the host = %q (err %v), want %q", got, err, "from-sandbox\n")
	}
	if fi, err := os.Stat(filepath.Join(fx.Workspace, "made", "dir")); err != nil || !fi.IsDir() {
		t.Errorf("made/dir on the host: %v, want a directory", err)
	}
	if got, want := ownerUID(t, created), ownerUID(t, fx.Workspace); req.Policy.User.Auto() && got != want {
		t.Errorf("created.txt owner = %d, want the workspace owner %d (user auto)", got, want)
	}
}

// testWorkspaceRO: with workspace ro the call reads but cannot change the
// session cwd.
func testWorkspaceRO(t *testing.T, s *suite) {
	fx := newFixture(t)
	host := filepath.Join(fx.Workspace, "host.txt")
	if err := os.WriteFile(host, []byte("from-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := s.request(fx, "cat host.txt\necho x > new.txt 2>/dev/null && echo WROTE\necho y >> host.txt 2>/dev/null && echo APPENDED\nrm -f host.txt 2>/dev/null\necho done")
	req.Policy.Workspace = "ro"
	res := s.runOK(t, req)
	if res.Stdout.Text != "from-host\ndone\n" {
		t.Errorf("stdout = %q, want %q (read works, writes fail)", res.Stdout.Text, "from-host\ndone\n")
	}
	if got, err := os.ReadFile(host); err != nil || string(got) != "from-host\n" {
		t.Errorf("host.txt after the call = %q (err %v), want it unchanged", got, err)
	}
	if _, err := os.Stat(filepath.Join(fx.Workspace, "new.txt")); err == nil {
		t.Errorf("the call created new.txt in a read-only workspace")
	}
}

// testWorkspaceNone: with workspace none the session cwd is not there.
func testWorkspaceNone(t *testing.T, s *suite) {
	fx := newFixture(t)
	if err := os.WriteFile(filepath.Join(fx.Workspace, "host.txt"), []byte("from-host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req := s.request(fx, "cat "+shellQuote(filepath.Join(fx.Workspace, "host.txt"))+" 2>/dev/null && echo VISIBLE; echo done")
	req.Policy.Workspace = "none"
	res := s.runOK(t, req)
	if res.Stdout.Text != "done\n" {
		t.Errorf("stdout = %q, want %q (the workspace must not be mounted)", res.Stdout.Text, "done\n")
	}
}

// extraMount prepares a host directory with one file and a policy mount
// of it at a target outside the workspace.
func extraMount(t *testing.T) (source, target string) {
	t.Helper()
	source = t.TempDir()
	if err := os.WriteFile(filepath.Join(source, "data.txt"), []byte("extra\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return source, "/sandboxtest-extra-" + randomHex(4)
}

// testPolicyMountRO: a read-only policy mount is readable and unchangeable.
func testPolicyMountRO(t *testing.T, s *suite) {
	fx := newFixture(t)
	source, target := extraMount(t)
	req := s.request(fx, "cat "+target+"/data.txt; echo x > "+target+"/new.txt 2>/dev/null && echo WROTE; echo done")
	req.Policy.Mounts = append(req.Policy.Mounts, mountOf(source, target, true))
	res := s.runOK(t, req)
	if res.Stdout.Text != "extra\ndone\n" {
		t.Errorf("stdout = %q, want %q", res.Stdout.Text, "extra\ndone\n")
	}
	if _, err := os.Stat(filepath.Join(source, "new.txt")); err == nil {
		t.Errorf("the call wrote into a read-only policy mount")
	}
}

// testPolicyMountRW: a read-write policy mount takes writes to the host.
func testPolicyMountRW(t *testing.T, s *suite) {
	fx := newFixture(t)
	source, target := extraMount(t)
	req := s.request(fx, "cat "+target+"/data.txt; echo written > "+target+"/new.txt")
	req.Policy.Mounts = append(req.Policy.Mounts, mountOf(source, target, false))
	res := s.runOK(t, req)
	if res.Stdout.Text != "extra\n" {
		t.Errorf("stdout = %q, want %q", res.Stdout.Text, "extra\n")
	}
	if got, err := os.ReadFile(filepath.Join(source, "new.txt")); err != nil || string(got) != "written\n" {
		t.Errorf("new.txt on the host = %q (err %v), want %q", got, err, "written\n")
	}
}

// testPolicyTmpfs: a policy tmpfs is writable, bounded by its size and
// empty in the next call.
func testPolicyTmpfs(t *testing.T, s *suite) {
	fx := newFixture(t)
	target := "/sandboxtest-scratch-" + randomHex(4)
	cmd := listDir(target) + "; head -c 524288 /dev/zero > " + target + "/small && echo SMALL-OK\n" +
		"head -c 4194304 /dev/zero > " + target + "/big 2>/dev/null && echo BIG-OK; echo done"
	for i := range 2 {
		req := s.request(fx, cmd)
		req.Policy.Tmpfs = append(req.Policy.Tmpfs, tmpfsOf(target, 1<<20))
		res := s.runOK(t, req)
		if res.Stdout.Text != "SMALL-OK\ndone\n" {
			t.Errorf("call %d: stdout = %q, want %q (an empty 1 MiB tmpfs: 512 KiB fit, 4 MiB do not)", i+1, res.Stdout.Text, "SMALL-OK\ndone\n")
		}
	}
}

// waitFor polls cond every 20 ms until it holds or d passes; it reports
// whether cond held. Used only to wait for a state, never to assert how
// long something took.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// mountOf is a policy bind mount.
func mountOf(source, target string, readOnly bool) sandbox.Mount {
	return sandbox.Mount{Source: source, Target: target, ReadOnly: readOnly}
}

// tmpfsOf is a policy tmpfs.
func tmpfsOf(target string, size int64) sandbox.Tmpfs {
	return sandbox.Tmpfs{Target: target, SizeBytes: size}
}
