package oci

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"golang.org/x/sys/unix"
)

// The test binary doubles as a service that crashes mid-call: with
// OCI_TEST_HELPER=crash it starts a call that prints "started" and
// sleeps, and waits to be killed.
const helperEnv = "OCI_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "crash" {
		crashHelper()
		return
	}
	// The executor finds the stub on PATH (the crash helper inherits it).
	os.Exit(fixtures.RunWithStub(m))
}

func crashHelper() {
	rt, state, inst, marker := os.Getenv("OCI_TEST_RUNTIME"), os.Getenv("OCI_TEST_STATE"), os.Getenv("OCI_TEST_INSTANCE"), os.Getenv("OCI_TEST_MARKER")
	e, err := New(Options{Runtime: rt, Service: driver.Service{StateDir: state}, InstanceID: inst})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(3)
	}
	p := testPolicy(&testing.T{}, rt)
	timeout, _ := strconv.ParseInt(os.Getenv("OCI_TEST_TIMEOUT_MS"), 10, 64)
	_, err = e.Run(context.Background(), &sandbox.Request{
		Command:   os.Getenv("OCI_TEST_PREFIX") + "echo started; sleep " + marker,
		Policy:    p,
		Stdout:    os.Stdout,
		TimeoutMs: timeout,
	})
	fmt.Fprintln(os.Stderr, "helper: the call returned:", err)
	os.Exit(4)
}

// crashInstance runs the crash helper on stateDir as instance inst and
// kills it with SIGKILL once its call runs, leaving its container,
// bundle, cgroups and lock file behind.
func crashInstance(t *testing.T, rt, stateDir, inst, marker string) {
	t.Helper()
	crashInstanceAfter(t, rt, stateDir, inst, marker, "")
}

// crashInstanceAfter is crashInstance for a call that runs the shell
// code prefix first.
func crashInstanceAfter(t *testing.T, rt, stateDir, inst, marker, prefix string) {
	t.Helper()
	cmd, out := startHelper(t, rt, stateDir, inst, marker, prefix, 0)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	_ = cmd.Wait()
}

// startHelper starts the crash helper on stateDir as instance inst, its
// call running the shell code prefix first and limited to timeoutMs (0:
// the policy's), and returns once the call runs.
func startHelper(t *testing.T, rt, stateDir, inst, marker, prefix string, timeoutMs int64) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{helperEnv + "=crash", "OCI_TEST_RUNTIME=" + rt, "OCI_TEST_STATE=" + stateDir,
		"OCI_TEST_INSTANCE=" + inst, "OCI_TEST_MARKER=" + marker, "OCI_TEST_PREFIX=" + prefix, "PATH=" + os.Getenv("PATH"),
		"OCI_TEST_TIMEOUT_MS=" + strconv.FormatInt(timeoutMs, 10)}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper printed %q (%v), stderr %q; want started", line, err, stderr.String())
	}
	return cmd, out
}

// TestReapAfterCrash kills an instance in the middle of a call and
// checks that Reap of another instance removes everything it left —
// and nothing of a live instance's running call.
func TestReapAfterCrash(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			state := testStateDir(t)
			dead := "crashed-" + rt
			marker := fmt.Sprintf("%d%d", 8100000, os.Getpid())
			crashInstance(t, rt, state, dead, marker)

			lock := filepath.Join(state, "instances", dead+".lock")
			if _, err := os.Stat(lock); err != nil {
				t.Fatalf("the crashed instance left no lock file: %v", err)
			}
			reaper, err := New(Options{Runtime: rt, Service: driver.Service{StateDir: state, Logger: testLogger(t)}})
			if err != nil {
				t.Fatal(err)
			}
			defer reaper.Close()

			// A live instance with a running call, which Reap must spare.
			live, err := New(Options{Runtime: rt, Service: driver.Service{StateDir: state, Logger: testLogger(t)}})
			if err != nil {
				t.Fatal(err)
			}
			defer live.Close()
			ctx, cancel := context.WithCancel(context.Background())
			liveDone := make(chan error, 1)
			started := make(chan struct{})
			go func() {
				res, err := live.Run(ctx, &sandbox.Request{
					Command: "echo go; sleep 1000", Policy: testPolicy(t, rt),
					Stdout: writerFunc(func(p []byte) { closeOnce(started) }),
				})
				if err == nil && !res.Aborted {
					err = fmt.Errorf("live call = %+v, want aborted", res)
				}
				liveDone <- err
			}()
			select {
			case <-started:
			case <-time.After(60 * time.Second):
				t.Fatal("the live call did not start")
			}

			deadCgroups := reaper.layout.dirsFor("/" + cgroupParent + "/" + dead)
			rep, err := reaper.Reap(context.Background())
			if err != nil {
				t.Errorf("Reap() = %v", err)
			}
			t.Logf("reaped %+v", rep)
			// The crashed call's stub saw its control channel end and
			// exited, so its runtime deleted the container already (or
			// is about to): Reap finds it or not, and the bundle.
			if !slices.Contains(rep.Instances, dead) || len(rep.Containers) > 1 || len(rep.Bundles) != 1 {
				t.Errorf("Reap() = %+v, want instance %q with at most one container and one bundle", rep, dead)
			}
			if slices.Contains(rep.Instances, live.instance) || slices.Contains(rep.Instances, reaper.instance) {
				t.Errorf("Reap() = %+v: touched a live instance", rep)
			}
			if _, err := os.Stat(lock); !os.IsNotExist(err) {
				t.Errorf("lock file of the dead instance: %v, want it removed", err)
			}
			for _, d := range deadCgroups {
				if _, err := os.Stat(d); !os.IsNotExist(err) {
					t.Errorf("cgroup %s of the dead instance remains (%v)", d, err)
				}
			}
			if left := fixtures.HostProcsWith(marker); len(left) > 0 {
				t.Errorf("processes of the dead instance survive:\n  %s", strings.Join(left, "\n  "))
			}
			entries, _ := os.ReadDir(reaper.bundlesDir())
			if len(entries) != 1 {
				t.Errorf("bundles after Reap = %d, want only the live call's", len(entries))
			}
			cs, _ := reaper.rt.list(context.Background())
			if len(cs) != 1 || cs[0].Annotations[reap.LabelInstance] != live.instance {
				t.Errorf("containers after Reap = %+v, want only the live call's", cs)
			}

			cancel()
			if err := <-liveDone; err != nil {
				t.Errorf("live call: %v", err)
			}
			if rep, err := reaper.Reap(context.Background()); err != nil || !rep.Empty() {
				t.Errorf("second Reap() = %+v, %v, want nothing to do", rep, err)
			}
			if left := leftovers(t, live); len(left) > 0 {
				t.Errorf("left behind: %q", left)
			}
		})
	}
}

type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// TestReapLeavesForeignCgroups: the cgroup hierarchy is shared by every
// state directory, so Reap must not touch the cgroups of an instance its
// own state directory does not know to be dead (a live instance of
// another service, say).
func TestReapLeavesForeignCgroups(t *testing.T) {
	e := newTestExecutor(t, RuntimeRunc)
	foreign := "i-foreign" + strings.ReplaceAll(fmt.Sprint(time.Now().UnixNano()), "-", "")
	dirs := e.layout.dirsFor("/" + cgroupParent + "/" + foreign)
	if len(dirs) == 0 {
		t.Fatal("no cgroup hierarchies found")
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			os.Remove(d)
			removeEmptyParents(filepath.Dir(d), cgroupParent)
		}
	})
	rep, err := e.Reap(context.Background())
	if err != nil {
		t.Fatalf("Reap() = %v", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("Reap removed %s of a foreign instance (report %+v)", d, rep)
		}
	}
	if slices.Contains(rep.Instances, foreign) {
		t.Errorf("Reap reported the foreign instance %s as reaped", foreign)
	}
}

// TestReapDeadOnlyWhenDead: ReapDead spawns no runtime while the state
// directory holds only this instance's own and live instances' state,
// and reaps everything once an instance has crashed in a call. The
// runtime is a wrapper that logs every invocation before running runc.
func TestReapDeadOnlyWhenDead(t *testing.T) {
	requireRuntime(t, RuntimeRunc)
	real, err := exec.LookPath(RuntimeRunc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "invocations")
	wrapper := filepath.Join(dir, "runc")
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	invocations := func() string {
		data, err := os.ReadFile(log)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return string(data)
	}
	state := testStateDir(t)
	e, err := New(Options{Runtime: RuntimeRunc, RuntimePath: wrapper, Service: driver.Service{StateDir: state, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// Another live instance with a finished call: still nothing to reap.
	live := newRuncExecutor(t, state)
	defer live.Close()
	if res, err := live.Run(t.Context(), &sandbox.Request{Command: "true", Policy: testPolicy(t, RuntimeRunc)}); err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("live call = %+v, %v", res, err)
	}
	if rep, err := e.ReapDead(t.Context()); err != nil || !rep.Empty() {
		t.Errorf("ReapDead() without a dead instance = %+v, %v; want nothing", rep, err)
	}
	if got := invocations(); got != "" {
		t.Errorf("ReapDead() without a dead instance ran the runtime: %q", got)
	}

	dead := "crashed-reapdead"
	crashInstance(t, RuntimeRunc, state, dead, fmt.Sprintf("%d%d", 8200000, os.Getpid()))
	rep, err := e.ReapDead(t.Context())
	// The stub ends the container when its instance dies (the lifeline),
	// often before the reap: at most one container, and its bundle.
	if err != nil || !slices.Contains(rep.Instances, dead) || len(rep.Containers) > 1 || len(rep.Bundles) != 1 {
		t.Errorf("ReapDead() after a crash = %+v, %v; want instance %q with at most one container and one bundle", rep, err, dead)
	}
	if !strings.Contains(invocations(), "list") {
		t.Errorf("ReapDead() after a crash did not list the runtime's containers: %q", invocations())
	}
	if rep, err := e.ReapDead(t.Context()); err != nil || !rep.Empty() {
		t.Errorf("second ReapDead() = %+v, %v; want nothing", rep, err)
	}
}

// TestReapDeadAfterFailedDelete: when the runtime cannot delete a call's
// container, the teardown keeps its bundle; after the executor closed,
// another instance's ReapDead sees that bundle and removes container and
// bundle. The first runtime is a wrapper that keeps the container after
// `run` (--keep) and whose delete always fails.
func TestReapDeadAfterFailedDelete(t *testing.T) {
	requireRuntime(t, RuntimeRunc)
	real, err := exec.LookPath(RuntimeRunc)
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "runc")
	script := `#!/bin/sh
for a in "$@"; do [ "$a" = delete ] && exit 1; done
n=$#
for a in "$@"; do
	if [ "$a" = run ]; then set -- "$@" run --keep; else set -- "$@" "$a"; fi
done
shift $n
exec ` + real + ` "$@"
`
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	state := testStateDir(t)
	e, err := New(Options{Runtime: RuntimeRunc, RuntimePath: wrapper, Service: driver.Service{StateDir: state, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Run(t.Context(), &sandbox.Request{Command: "true", Policy: testPolicy(t, RuntimeRunc)})
	t.Logf("call with a failing delete: %+v, %v", res, err)
	if err := e.Close(); err != nil {
		t.Logf("Close() = %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "bundles")); len(ents) != 1 {
		t.Fatalf("bundles after a failed delete = %d, want the call's bundle kept", len(ents))
	}
	reaper := newRuncExecutor(t, state)
	defer reaper.Close()
	rep, err := reaper.ReapDead(t.Context())
	if err != nil || len(rep.Containers) != 1 || len(rep.Bundles) != 1 {
		t.Errorf("ReapDead() after a failed delete = %+v, %v; want one container and one bundle", rep, err)
	}
	if cs, _ := reaper.rt.list(t.Context()); len(cs) != 0 {
		t.Errorf("containers after ReapDead() = %+v, want none", cs)
	}
}

// TestReapSpillOfDeadCall: a call without a session directory that
// spilled its output when its instance died leaves a spill file in the
// state directory whose path no one was told; Reap removes it with the
// call's bundle. A spill file of a call this state directory has no
// bundle for stays.
func TestReapSpillOfDeadCall(t *testing.T) {
	requireRuntime(t, RuntimeRunc)
	state := testStateDir(t)
	dead := "crashed-spill"
	crashInstanceAfter(t, RuntimeRunc, state, dead, fmt.Sprintf("%d%d", 8300000, os.Getpid()), "seq 1 300000 >&2; ")
	spills, _ := filepath.Glob(filepath.Join(state, "spill", "*"))
	if len(spills) != 1 || !strings.HasSuffix(spills[0], ".stderr") {
		t.Fatalf("spill files of the crashed call = %q, want its stderr", spills)
	}
	real, err := filepath.EvalSymlinks(spills[0])
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(state, "spill", "call-000000000000000000000000.stdout")
	if err := os.WriteFile(other, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newRuncExecutor(t, state)
	defer e.Close()
	rep, err := e.Reap(t.Context())
	if err != nil || !slices.Contains(rep.Instances, dead) || len(rep.Bundles) != 1 {
		t.Fatalf("Reap() = %+v, %v; want instance %q and its bundle", rep, err, dead)
	}
	if !slices.Contains(rep.Files, real) {
		t.Errorf("Reap().Files = %q, want the spill file %s", rep.Files, real)
	}
	if _, err := os.Stat(spills[0]); !os.IsNotExist(err) {
		t.Errorf("spill file of the dead call after Reap: %v, want removed", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("spill file of a call without a bundle after Reap: %v, want kept", err)
	}
}

// TestReapUnmarkedBundles: a bundle an instance made and died before its
// marker was written (none, or a torn one) is young; while another live
// instance could be making it right now it stays; a reaper alone on the
// state directory with a warm pool (which may be preparing one) waits
// for unmarkedBundleSettle, one without a pool removes it at once.
func TestReapUnmarkedBundles(t *testing.T) {
	requireRuntime(t, RuntimeRunc)
	state := testStateDir(t)
	e := newRuncExecutor(t, state)
	defer e.Close()
	bare := filepath.Join(e.bundlesDir(), "call-00000000000000000000000a")
	torn := filepath.Join(e.bundlesDir(), "call-00000000000000000000000b")
	unmarked := func() {
		t.Helper()
		for _, d := range []string{bare, torn} {
			if err := os.MkdirAll(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(torn, bundleMarker), []byte(`{"instance":"i-`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed := func(what string, rep reap.Report, err error) {
		t.Helper()
		if err != nil || !slices.Equal(rep.Bundles, []string{bare, torn}) {
			t.Errorf("Reap() %s = %+v, %v; want bundles %q and %q", what, rep, err, bare, torn)
		}
		for _, d := range []string{bare, torn} {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("%s after Reap %s: %v, want removed", d, what, err)
			}
		}
	}
	unmarked()

	pooled, err := New(Options{Runtime: RuntimeRunc, Service: driver.Service{StateDir: state, Logger: testLogger(t)}, Pool: &pool.Options{}})
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.Close()
	if rep, err := e.Reap(t.Context()); err != nil || len(rep.Bundles) != 0 {
		t.Errorf("Reap() with another live instance = %+v, %v; want the young unmarked bundles kept", rep, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Alone, but with a pool: just made, so they stay for now.
	if rep, err := pooled.Reap(t.Context()); err != nil || len(rep.Bundles) != 0 {
		t.Errorf("Reap() alone with a pool, of bundles made just now = %+v, %v; want them kept", rep, err)
	}
	settled := time.Now().Add(-2 * unmarkedBundleSettle)
	for _, d := range []string{bare, torn} {
		if err := os.Chtimes(d, settled, settled); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := pooled.Reap(t.Context())
	removed("alone with a pool, once settled", rep, err)
	if err := pooled.Close(); err != nil {
		t.Fatal(err)
	}

	// Alone without a pool: nothing can be making them, so they go at once.
	unmarked()
	plain := newRuncExecutor(t, state)
	defer plain.Close()
	rep, err = plain.Reap(t.Context())
	removed("alone without a pool, made just now", rep, err)
}

// TestReapBundleRemovalCutShort: a bundle whose removal stopped half way
// (here at a file that cannot be removed; in life the service killed
// during its teardown) still has its marker, so Reap removes it at once
// once its instance is dead, although the removal has just touched it.
func TestReapBundleRemovalCutShort(t *testing.T) {
	requireRuntime(t, RuntimeRunc)
	state := testStateDir(t)
	e := newRuncExecutor(t, state)
	defer e.Close()
	dead := newRuncExecutor(t, state)
	dir := filepath.Join(e.bundlesDir(), "call-00000000000000000000000c")
	b, err := createBundle(dir, marker{Instance: dead.instance, Runtime: RuntimeRunc, Container: filepath.Base(dir)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.path(bundleBound), []byte("call-00000000000000000000000d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stuck []string
	for i := range 8 {
		sub := b.path(fmt.Sprintf("part-%d", i))
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(sub, "file")
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		setImmutable(t, f, true)
		stuck = append(stuck, f)
	}
	removeErr := b.remove()
	for _, f := range stuck { // so that t.TempDir's cleanup can remove them
		setImmutable(t, f, false)
	}
	if removeErr == nil {
		t.Fatal("remove() of a bundle with an immutable file succeeded")
	}
	for _, name := range []string{bundleMarker, bundleBound} {
		if _, err := os.Stat(b.path(name)); err != nil {
			t.Errorf("%s after a removal cut short: %v, want kept", name, err)
		}
	}
	if err := dead.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := e.Reap(t.Context())
	if err != nil || !slices.Equal(rep.Bundles, []string{dir}) {
		t.Errorf("Reap() = %+v, %v; want bundle %q of the dead instance removed at once", rep, err, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s after Reap: %v, want removed", dir, err)
	}
}

// setImmutable sets or clears the immutable attribute of file f.
func setImmutable(t *testing.T, f string, on bool) {
	t.Helper()
	fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("%s: read flags: %v", f, err)
	}
	if on {
		flags |= fsImmutableFlag
	} else {
		flags &^= fsImmutableFlag
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
		t.Fatalf("%s: set flags: %v", f, err)
	}
}

// fsImmutableFlag is FS_IMMUTABLE_FL of linux/fs.h, which x/sys/unix
// does not define.
const fsImmutableFlag = 0x10

// newRuncExecutor opens a runc executor on state directory state; the
// caller closes it.
func newRuncExecutor(t *testing.T, state string) *Executor {
	t.Helper()
	e, err := New(Options{Runtime: RuntimeRunc, Service: driver.Service{StateDir: state, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
