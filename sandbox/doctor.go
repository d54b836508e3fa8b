package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Checkf is the check called name, passed if ok, with its detail
// formatted from format and args.
func Checkf(name string, ok bool, format string, args ...any) Check {
	return Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)}
}

// CheckStateDir is the doctors' "state" check: dir is an absolute path
// that exists or can be created (0700) and takes a new file.
func CheckStateDir(dir string) Check {
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

// DoctorRun is the doctors' "run" check: one real call of `true` on ex
// under p, with call ID "doctor-<instance>"; it returns how long the call
// took, or why it failed.
func DoctorRun(ctx context.Context, ex Executor, p Policy, instance string) (time.Duration, error) {
	t := time.Now()
	res, err := ex.Run(ctx, &Request{Command: "true", Policy: p, CallID: "doctor-" + instance})
	if err != nil {
		return 0, err
	}
	if code := ExitCode(res, nil); code != 0 {
		return 0, fmt.Errorf("`true` exited with status %d; stderr %q", code, res.Stderr.Text)
	}
	return time.Since(t), nil
}
