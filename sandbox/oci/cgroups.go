package oci

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// cgroupLayout describes the cgroup mounts of this host.
type cgroupLayout struct {
	// mounts maps each hierarchy's mount point to its controllers
	// ("" for the cgroup2 hierarchy).
	mounts []cgroupMount
	// hybrid is true when cgroup v1 hierarchies and a cgroup2 mount
	// coexist (Debian's "unified" at /sys/fs/cgroup/unified).
	hybrid bool
	// v2 is true on a pure cgroup2 host.
	v2 bool
}

type cgroupMount struct {
	point string // mount point, e.g. /sys/fs/cgroup/memory
	root  string // the mount's root within its hierarchy, usually "/"
	v2    bool
	// subsystems are the v1 controllers (and name= hierarchies) of the
	// mount, e.g. ["memory"] or ["name=systemd"]; nil for cgroup2.
	subsystems []string
}

// readCgroupLayout parses /proc/self/mountinfo.
func readCgroupLayout() (cgroupLayout, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return cgroupLayout{}, err
	}
	defer f.Close()
	var l cgroupLayout
	var v1, v2 int
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m, ok := parseCgroupMountinfo(sc.Text())
		if !ok {
			continue
		}
		if m.v2 {
			v2++
		} else {
			v1++
		}
		l.mounts = append(l.mounts, m)
	}
	if err := sc.Err(); err != nil {
		return cgroupLayout{}, err
	}
	l.hybrid = v1 > 0 && v2 > 0
	l.v2 = v1 == 0 && v2 > 0
	return l, nil
}

// parseCgroupMountinfo reads one mountinfo line, reporting a cgroup or
// cgroup2 mount.
func parseCgroupMountinfo(line string) (cgroupMount, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return cgroupMount{}, false
	}
	f := strings.Fields(pre)
	p := strings.Fields(post)
	if len(f) < 5 || len(p) < 3 {
		return cgroupMount{}, false
	}
	m := cgroupMount{point: unescapeMountinfo(f[4]), root: unescapeMountinfo(f[3])}
	switch p[0] {
	case "cgroup2":
		m.v2 = true
	case "cgroup":
		for _, o := range strings.Split(p[2], ",") {
			switch {
			case strings.HasPrefix(o, "name="):
				m.subsystems = append(m.subsystems, o)
			case o == "rw" || o == "ro" || strings.Contains(o, "="):
			case knownV1Controller(o):
				m.subsystems = append(m.subsystems, o)
			}
		}
	default:
		return cgroupMount{}, false
	}
	return m, true
}

func knownV1Controller(o string) bool {
	switch o {
	case "cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "net_cls",
		"blkio", "perf_event", "net_prio", "hugetlb", "pids", "rdma", "misc":
		return true
	}
	return false
}

// unifiedMounts returns the cgroup2 mount points of a hybrid host, the
// ones crun must not see.
func (l cgroupLayout) unifiedMounts() []string {
	if !l.hybrid {
		return nil
	}
	var out []string
	for _, m := range l.mounts {
		if m.v2 {
			out = append(out, m.point)
		}
	}
	return out
}

// cgroupParent is the top directory of every call's cgroups, in every
// hierarchy: /dsh-sandbox/<instance>/<container>. The path is absolute
// (from each hierarchy's root, like Docker's /docker/<id>) because the
// runtimes do not agree on what a relative path is relative to on cgroup
// v1 (runc nests it below its own cgroup per controller, crun and runsc
// below the root), and an absolute one can be found again by Reap from
// any process. The instance level lets Reap take everything a dead
// instance left with one directory per hierarchy.
const cgroupParent = "dsh-sandbox"

// cgroupsPath returns the cgroupsPath of a call's container.
func cgroupsPath(instance, id string) string {
	return "/" + cgroupParent + "/" + instance + "/" + id
}

// dirsFor returns the directory of the absolute cgroup path p in every
// hierarchy of l, sorted. Hierarchies whose mount does not show p (a
// mount of a sub-tree that p lies outside) are skipped.
func (l cgroupLayout) dirsFor(p string) []string {
	var dirs []string
	seen := map[string]bool{}
	for _, m := range l.mounts {
		inner, ok := withinRoot(m.root, p)
		if !ok {
			continue
		}
		d := filepath.Join(m.point, inner)
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	sort.Strings(dirs)
	return dirs
}

// withinRoot returns p relative to the mount root, and whether p lies
// inside it.
func withinRoot(root, p string) (string, bool) {
	root = filepath.Clean("/" + root)
	p = filepath.Clean("/" + p)
	if root == "/" {
		return p, true
	}
	if p == root {
		return "/", true
	}
	if strings.HasPrefix(p, root+"/") {
		return strings.TrimPrefix(p, root), true
	}
	return "", false
}

// removeCgroupDirs removes each cgroup directory and everything below it,
// deepest first, and verifies that none remains. A directory that still
// holds tasks is retried for a short while (a runtime's helper processes
// may take a moment to exit after delete), bounded by ctx.
func removeCgroupDirs(ctx context.Context, dirs []string) error {
	var errs []error
	for _, d := range dirs {
		if err := removeCgroupTree(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeCgroupTree(ctx context.Context, dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(ctx, filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	delay := time.Millisecond
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			break
		}
		if !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("cgroup %s: remove: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup %s: still busy: %w", dir, ctx.Err())
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cgroup %s remains after removal", dir)
	}
	return nil
}

// removeEmptyParents removes dir and then each parent up to and including
// the one named stop, as long as they are empty cgroups. A busy or missing
// directory ends the walk without error: another call or instance may be
// using it.
func removeEmptyParents(dir, stop string) {
	for {
		if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
			return
		}
		if filepath.Base(dir) == stop {
			return
		}
		next := filepath.Dir(dir)
		if next == dir {
			return
		}
		dir = next
	}
}
