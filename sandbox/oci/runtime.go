package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Runtime names accepted in Options.Runtime.
const (
	RuntimeRunc  = "runc"
	RuntimeCrun  = "crun"
	RuntimeRunsc = "runsc"
)

// runtimeCLI drives one OCI runtime binary through its command line. All
// three runtimes share the subcommands used here (run, kill, delete,
// state, list); they differ in global flags and where they keep state.
//
// A runtimeCLI is safe for concurrent use.
type runtimeCLI struct {
	name string // RuntimeRunc, RuntimeCrun or RuntimeRunsc
	path string // absolute path of the binary
	root string // the runtime's state root (--root)
	// ns, when set, starts every invocation inside a private mount
	// namespace where the cgroup2 mounts of a hybrid host are hidden
	// (crun refuses hybrid cgroups, DESIGN §3.11).
	ns *mountNamespace
}

// containerState is the subset of `runtime state` / `runtime list` JSON
// used here; the three runtimes agree on these keys.
type containerState struct {
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Status      string            `json:"status"`
	Bundle      string            `json:"bundle"`
	Annotations map[string]string `json:"annotations"`
}

// globalArgs are the flags every invocation starts with. logPath, when
// non-empty, sends the runtime's own log (not the container's output) to
// that file where the runtime supports it.
func (r *runtimeCLI) globalArgs(logPath string) []string {
	args := []string{"--root", r.root}
	switch r.name {
	case RuntimeRunc:
		if logPath != "" {
			args = append(args, "--log", logPath, "--log-format", "json")
		}
	case RuntimeCrun:
		if logPath != "" {
			args = append(args, "--log=file:"+logPath, "--log-format=json")
		}
	case RuntimeRunsc:
		// The sandbox has only loopback: the spec's network namespace
		// is new and empty, and gVisor's own stack must not be wired to
		// any host interface. --oci-seccomp makes gVisor enforce the
		// spec's seccomp profile on the application, as runc and crun
		// do (by default it only filters its own host syscalls).
		args = append(args, "--network=none", "--oci-seccomp")
	}
	return args
}

// command builds an invocation of the runtime with an empty environment:
// the runtimes need none, and the service's own env must not reach them.
func (r *runtimeCLI) command(ctx context.Context, logPath string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.path, append(r.globalArgs(logPath), args...)...)
	cmd.Env = []string{}
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// start starts cmd, inside the private mount namespace when there is one.
func (r *runtimeCLI) start(cmd *exec.Cmd) error {
	if r.ns != nil {
		return r.ns.start(cmd)
	}
	return cmd.Start()
}

// output runs a short runtime subcommand and returns its stdout; a
// failure carries the runtime's stderr.
func (r *runtimeCLI) output(ctx context.Context, args ...string) ([]byte, error) {
	cmd := r.command(ctx, "", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := r.start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return nil, fmt.Errorf("%s %s: %w: %s", r.name, strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// runCommand returns the foreground `run` of the container id from bundle;
// the runtime writes the container's pid to pidFile once it exists.
func (r *runtimeCLI) runCommand(ctx context.Context, bundle, id, pidFile, logPath string) *exec.Cmd {
	return r.command(ctx, logPath, "run", "--bundle", bundle, "--pid-file", pidFile, id)
}

// kill sends sig to every process of the container.
func (r *runtimeCLI) kill(ctx context.Context, id string, sig syscall.Signal) error {
	_, err := r.output(ctx, "kill", "--all", id, signalArg(sig))
	return err
}

// signalArg spells sig the way all three runtimes accept it.
func signalArg(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGKILL:
		return "KILL"
	}
	return fmt.Sprint(int(sig))
}

// exists reports whether the runtime has state for container id, by
// looking at its state root rather than running the binary.
func (r *runtimeCLI) exists(id string) (bool, error) {
	var p string
	switch r.name {
	case RuntimeRunsc:
		// runsc keeps "<container>_sandbox:<sandbox>.state"; a call's
		// container is its own sandbox.
		p = filepath.Join(r.root, id+"_sandbox:"+id+".state")
	default:
		p = filepath.Join(r.root, id)
	}
	_, err := os.Lstat(p)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, err
}

// remove kills and deletes container id (delete --force) when the
// runtime has state for it, and verifies that none is left.
func (r *runtimeCLI) remove(ctx context.Context, id string) error {
	ok, err := r.exists(id)
	if err != nil {
		return err
	}
	if !ok {
		return r.removeLock(id)
	}
	// Kill first: runsc's delete --force otherwise waits seconds for a
	// running sandbox to stop.
	_ = r.kill(ctx, id, syscall.SIGKILL)
	derr := r.delete(ctx, id)
	if err := r.removeLock(id); err != nil && derr == nil {
		derr = err
	}
	ok, err = r.exists(id)
	if err != nil {
		return err
	}
	if ok {
		if derr == nil {
			derr = errors.New("state remains after delete")
		}
		return fmt.Errorf("container %q: %w", id, derr)
	}
	return nil
}

// deleteAttempts bounds the runs of `delete --force` for one container
// whose state remains after a failed one, deleteRetryWait apart. The
// kill before it makes runsc's foreground `run` rewrite the container's
// state file as the sandbox ends; a delete that reads the file in the
// middle fails ("reading container metadata file …: unexpected end of
// JSON input", seen once in 200 calls under load), and the next one
// finds it whole.
const (
	deleteAttempts  = 3
	deleteRetryWait = 50 * time.Millisecond
)

// delete runs `delete --force` on container id, again while it fails and
// the container's state remains (deleteAttempts), and returns the last
// failure.
func (r *runtimeCLI) delete(ctx context.Context, id string) error {
	var err error
	for attempt := 1; attempt <= deleteAttempts; attempt++ {
		if attempt > 1 {
			if ok, serr := r.exists(id); serr != nil || !ok {
				return err
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(deleteRetryWait):
			}
		}
		if _, err = r.output(ctx, "delete", "--force", id); err == nil {
			return nil
		}
	}
	return err
}

// removeLock removes the lock file runsc leaves behind for a container
// that was killed; for runc and crun it does nothing.
func (r *runtimeCLI) removeLock(id string) error {
	if r.name != RuntimeRunsc {
		return nil
	}
	err := os.Remove(filepath.Join(r.root, id+"_sandbox:"+id+".lock"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// state returns the runtime's view of container id.
func (r *runtimeCLI) state(ctx context.Context, id string) (*containerState, error) {
	out, err := r.output(ctx, "state", id)
	if err != nil {
		return nil, err
	}
	var st containerState
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("%s state %s: %w", r.name, id, err)
	}
	return &st, nil
}

// listAttempts bounds the runs of `list` while it fails because a
// container's state went away as it listed (vanishedDuringList).
const listAttempts = 3

// vanishedDuringList reports whether err, of a failed `list`, is a
// container's state directory in the root removed between the runtime's
// reading of the root and of that directory: runc 1.1 fails the whole
// listing then ("stat <root>/<id>: no such file or directory"), as when a
// call's foreground run deletes its container while reap lists (seen in
// CI: TestReapDeadOnlyWhenDead). Listing again no longer sees it.
func (r *runtimeCLI) vanishedDuringList(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "no such file or directory") && strings.Contains(msg, r.root+string(filepath.Separator))
}

// list returns every container in the runtime's state root. crun's list
// omits annotations, so those are filled in from `state`.
func (r *runtimeCLI) list(ctx context.Context) ([]containerState, error) {
	if _, err := os.Stat(r.root); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []byte
	var err error
	for attempt := 1; ; attempt++ {
		out, err = r.output(ctx, "list", "--format=json")
		if err == nil || attempt == listAttempts || !r.vanishedDuringList(err) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	out = bytes.TrimSpace(out)
	if len(out) == 0 || bytes.Equal(out, []byte("null")) {
		return nil, nil
	}
	var all []containerState
	if err := json.Unmarshal(out, &all); err != nil {
		return nil, fmt.Errorf("%s list: %w", r.name, err)
	}
	for i := range all {
		if all[i].Annotations == nil {
			if st, err := r.state(ctx, all[i].ID); err == nil {
				all[i].Annotations = st.Annotations
			}
		}
	}
	return all, nil
}

// version returns the first line of `runtime --version`.
func (r *runtimeCLI) version(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, r.path, "--version")
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", r.name, err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

// lookRuntime validates a runtime name and finds its binary: path when
// given, else the name on PATH. A missing binary is ErrUnavailable naming
// the runtime.
func lookRuntime(name, path string) (string, error) {
	switch name {
	case RuntimeRunc, RuntimeCrun, RuntimeRunsc:
	default:
		return "", sandbox.Errorf(sandbox.ErrInvalid, "runtime %q: want runc, crun or runsc", name)
	}
	if path == "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", sandbox.Errorf(sandbox.ErrUnavailable, "runtime %q: %v", name, err)
		}
		path = p
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", sandbox.Errorf(sandbox.ErrUnavailable, "runtime %q at %q: %v", name, path, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", sandbox.Errorf(sandbox.ErrUnavailable, "runtime %q at %q: %v", name, abs, err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", sandbox.Errorf(sandbox.ErrUnavailable, "runtime %q at %q: not an executable file", name, abs)
	}
	return abs, nil
}
