package idmap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// runtimePaths are paths below the root that the runtimes create, mount
// on or write to themselves, whatever the spec's mounts say.
var runtimePaths = []string{"/dev", "/proc", "/sys", "/dev/pts", "/dev/shm", "/dev/mqueue",
	"/dev/ptmx", "/dev/console", "/dev/null", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr"}

// CheckRootfs refuses a root file system (an image's files, at rootDir)
// in which a component of a mount destination of mounts, or of a path the
// runtime itself prepares (/dev, /proc, /sys and what runtimes create in
// /dev), is a symbolic link: runtimes join such paths to the rootfs and
// follow the link on the host, where an image's /dev → /some/host/dir
// made runc ≤ 1.3.5 remove ptmx and create fd, stdin, stdout and stderr
// links in that host directory (CVE-2026-41579), and a /dev/null,
// /dev/console or /proc link redirected masks, the console's bind and
// procfs writes (CVE-2025-31133, CVE-2025-52565, CVE-2025-52881). A
// component below a tmpfs of mounts is not checked: the tmpfs hides the
// image's. The paths are read with Lstat below rootDir only.
func CheckRootfs(rootDir string, mounts []specs.Mount) error {
	tmpfs := map[string]bool{}
	dests := slicesUnique(runtimePaths)
	for _, m := range mounts {
		d := filepath.Clean(m.Destination)
		if m.Type == "tmpfs" {
			tmpfs[d] = true
		}
		if filepath.IsAbs(d) {
			dests = append(dests, d)
		}
	}
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	defer root.Close()
	for _, d := range dests {
		rel := ""
		for _, part := range strings.Split(strings.TrimPrefix(d, "/"), "/") {
			if part == "" {
				break
			}
			rel = filepath.Join(rel, part)
			fi, err := root.Lstat(rel)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if err != nil {
				return fmt.Errorf("rootfs: /%s: %w", rel, err)
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				return fmt.Errorf("the image's /%s is a symbolic link, which the runtime would follow on the host when it prepares %s; refused (images must have real directories there)", rel, d)
			}
			if tmpfs["/"+rel] {
				break // the tmpfs hides what the image has below
			}
		}
	}
	return nil
}

func slicesUnique(s []string) []string {
	out := make([]string, 0, len(s))
	seen := map[string]bool{}
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
