package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
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
	return Check{Name: "state", OK: true, Detail: dir + " is writable, " + fileSystem(dir)}
}

// fileSystems names file systems by statfs(2)'s f_type.
var fileSystems = map[uint32]string{
	0x01021994: "tmpfs",
	0x858458f6: "ramfs",
	0xef53:     "ext4", // ext2, ext3 and ext4
	0x58465342: "xfs",
	0x9123683e: "btrfs",
	0x794c7630: "overlayfs",
}

// fileSystem says which file system holds dir and, when it is not held
// in memory, what that costs: every call of the oci backend makes and
// removes some 50 files and directories there (its bundle, mount points,
// the runtime's state). On an ext4 without a journal the kernel looks for
// each new inode past every inode removed in the last half minute, so under
// a steady load that cost grows with the call rate (docs/operations.md).
func fileSystem(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Sprintf("file system unknown: %v", err)
	}
	name, ok := fileSystems[uint32(st.Type)]
	if !ok {
		name = fmt.Sprintf("a file system of type %#x", uint32(st.Type))
	}
	if name == "tmpfs" || name == "ramfs" { // in memory
		return "on " + name
	}
	return "on " + name + ", not tmpfs: calls make and remove files there (some 50 each on the oci backend); a tmpfs (the usual /run) costs less CPU per call"
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
