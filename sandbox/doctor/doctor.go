package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Check is one finding of a backend's doctor: what was checked, whether
// it passed, and what was found or why it failed.
type Check struct {
	// Name says what was checked, e.g. "binary", "version", "daemon",
	// "cgroups", "state" or "run".
	Name string `json:"name"`
	// OK is true when the check passed.
	OK bool `json:"ok"`
	// Detail says what was found, or why the check failed.
	Detail string `json:"detail"`
}

// Checkf is the check called name, passed if ok, with its detail
// formatted from format and args.
func Checkf(name string, ok bool, format string, args ...any) Check {
	return Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)}
}

// StateDir is the doctors' "state" check: dir is an absolute path
// that exists or can be created (0700) and takes a new file.
func StateDir(dir string) Check {
	if dir == "" || !filepath.IsAbs(dir) {
		return Check{Name: "state", Detail: fmt.Sprintf("StateDir %q is not an absolute path", dir)}
	}
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		var f *os.File
		if f, err = os.CreateTemp(dir, ".doctor-*"); err == nil {
			f.Close()
			err = os.Remove(f.Name())
		}
	}
	if err != nil {
		return Check{Name: "state", Detail: fmt.Sprintf("StateDir %s is not usable: %v", dir, err)}
	}
	return Check{Name: "state", OK: true, Detail: dir + " is writable"}
}

// Run is the doctors' "run" check: one real call of `true` on ex
// under p, with call ID "doctor-<instance>"; it returns how long the call
// took, or why it failed.
func Run(ctx context.Context, ex sandbox.Executor, p sandbox.Policy, instance string) (time.Duration, error) {
	t := time.Now()
	res, err := ex.Run(ctx, &sandbox.Request{Command: "true", Policy: p, CallID: "doctor-" + instance})
	if err != nil {
		return 0, err
	}
	if code := sandbox.ExitCode(res, nil); code != 0 {
		return 0, fmt.Errorf("`true` exited with status %d; stderr %q", code, res.Stderr.Text)
	}
	return time.Since(t), nil
}
