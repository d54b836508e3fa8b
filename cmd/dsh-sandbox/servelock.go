package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// serveLockName is the lock file in the data directory that one `serve`
// holds while it runs: two services on one data directory would
// interleave the audit log and share its checkpoint.
const serveLockName = "serve.lock"

// lockDataDir takes the exclusive lock of dir's serve.lock (flock, held
// until the returned file is closed or the process ends, so a crashed
// service holds nothing) and writes this process's pid in it. When
// another process holds it, the error names the lock file and that
// process's pid.
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "--data-dir: %v", err)
	}
	path := filepath.Join(dir, serveLockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "--data-dir: lock %s: %v", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := "unknown"
			buf := make([]byte, 32)
			if n, _ := f.ReadAt(buf, 0); n > 0 {
				if pid, err := strconv.Atoi(string(bytes.TrimSpace(buf[:n]))); err == nil {
					holder = strconv.Itoa(pid)
				}
			}
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "--data-dir %s is in use by another serve (pid %s holds the lock %s); one service per data directory", dir, holder, path)
		}
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "--data-dir: lock %s: %v", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	if err != nil {
		f.Close()
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "--data-dir: lock %s: %v", path, err)
	}
	return f, nil
}
