package oci

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
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

// controllerDir returns the directory of the absolute cgroup path p in
// the hierarchy of controller: the cgroup v1 one, or the cgroup2 one on
// a pure cgroup2 host; "" when the host has neither.
func (l cgroupLayout) controllerDir(p, controller string) string {
	for _, m := range l.mounts {
		if m.v2 != l.v2 || (!m.v2 && !slices.Contains(m.subsystems, controller)) {
			continue
		}
		if inner, ok := withinRoot(m.root, p); ok {
			return filepath.Join(m.point, inner)
		}
	}
	return ""
}

// stubTaskReserve is how many tasks above the call's limit the container
// of a stub may hold until Bind: room for the stub's own threads (a Go
// program's: 7 or 8 measured when it reports Ready, before it kept
// spareThreads idle ones, so about 12 now).
const stubTaskReserve = 32

// reserveStubTasks raises the task limit of spec, the spec of a stub's
// container, by stubTaskReserve and returns the call's limit (0: none).
func reserveStubTasks(spec *specs.Spec) int64 {
	if spec.Linux == nil || spec.Linux.Resources == nil || spec.Linux.Resources.Pids == nil {
		return 0
	}
	pids := spec.Linux.Resources.Pids
	if pids.Limit == nil || *pids.Limit <= 0 {
		return 0
	}
	limit := *pids.Limit
	pids.Limit = ptr(limit + stubTaskReserve)
	return limit
}

// limitTasks sets the task limit of cgroup path p, a stub's container
// whose stub waits for its call, to limit plus the tasks in it now (the
// stub's threads): the command then gets the call's limit whole, and
// the stub's threads do not count against it.
func (l cgroupLayout) limitTasks(p string, limit int64) error {
	dir := l.controllerDir(p, "pids")
	if dir == "" {
		return fmt.Errorf("no pids cgroup hierarchy for %s", p)
	}
	data, err := os.ReadFile(filepath.Join(dir, "pids.current"))
	if err != nil {
		return fmt.Errorf("pids cgroup %s: %w", dir, err)
	}
	stub, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return fmt.Errorf("pids cgroup %s: pids.current: %w", dir, err)
	}
	if err := writeCgroupFile(filepath.Join(dir, "pids.max"), strconv.FormatInt(limit+stub, 10)); err != nil {
		return fmt.Errorf("pids cgroup %s: limit: %w", dir, err)
	}
	return nil
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

// containerLeaf is the runtime's own cgroup below a call's cgroup: the
// runtime gets cgroupsPath(…)/containerLeaf, so that the call's cgroup
// (which the executor creates and removes) outlives the runtime's, whose
// `run` removes it when the container exits.
const containerLeaf = "container"

// containerCgroupsPath is the spec's linux.cgroupsPath of a call's
// container.
func containerCgroupsPath(instance, id string) string {
	return cgroupsPath(instance, id) + "/" + containerLeaf
}

// oomHeadroom is how much higher the container's own memory limit is
// than the call's on cgroup v1 (see prepareOOMAccounting): more than the
// largest single charge (a 2 MiB huge page), so that the call's cgroup
// always reaches its limit first.
const oomHeadroom = 4 << 20

// prepareOOMAccounting makes an out-of-memory kill in the call's cgroup
// path p observable after the runtime removed the container's cgroup
// (p's child containerLeaf; the spec's limits are those of SpecOpts), and
// returns the watch to ask (nil when there is nothing to watch).
//
// On cgroup v2 the kernel counts an OOM kill in every ancestor's
// memory.events, which oomKilled reads from p's directory. On cgroup v1
// the kill is counted only in the victim's own cgroup, which the runtime
// removes when the container exits. So p's directory in the memory
// hierarchy is created with the spec's memory (and memory+swap) limit,
// the container's own limits in spec are raised by oomHeadroom so that
// p's limit is always the one reached (it enforces the policy's limit),
// and an eventfd is registered for p's memory.oom_control: the kernel
// signals it when p runs out of memory. A spec without a memory limit is
// left alone. The directory is removed with the call's other cgroup
// directories; close the watch.
func (l cgroupLayout) prepareOOMAccounting(p string, spec *specs.Spec) (*oomWatch, error) {
	if l.v2 || spec.Linux == nil || spec.Linux.Resources == nil || spec.Linux.Resources.Memory == nil {
		return nil, nil
	}
	mem := spec.Linux.Resources.Memory
	if mem.Limit == nil || *mem.Limit <= 0 {
		return nil, nil
	}
	dir := l.controllerDir(p, "memory")
	if dir == "" {
		return nil, nil // no memory hierarchy: the runtime has none to limit either
	}
	if err := mkdirCgroup(dir); err != nil {
		return nil, fmt.Errorf("memory cgroup %s: %w", dir, err)
	}
	limit := strconv.FormatInt(*mem.Limit, 10)
	if err := writeCgroupFile(filepath.Join(dir, "memory.limit_in_bytes"), limit); err != nil {
		return nil, fmt.Errorf("memory cgroup %s: limit: %w", dir, err)
	}
	if mem.Swap != nil && *mem.Swap > 0 {
		// Absent when the kernel does not account swap.
		sw := filepath.Join(dir, "memory.memsw.limit_in_bytes")
		err := writeCgroupFile(sw, strconv.FormatInt(*mem.Swap, 10))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("memory cgroup %s: memory+swap limit: %w", dir, err)
		}
		mem.Swap = ptr(*mem.Swap + oomHeadroom)
	}
	mem.Limit = ptr(*mem.Limit + oomHeadroom)
	w, err := watchOOM(dir)
	if err != nil {
		return nil, fmt.Errorf("memory cgroup %s: %w", dir, err)
	}
	return w, nil
}

// mkdirCgroup creates the cgroup directory dir and its parents. A parent
// that vanishes meanwhile (Reap removing the empty cgroupParent between
// two of MkdirAll's steps) is made again, a few times: once dir exists,
// its parents are not empty and stay.
func mkdirCgroup(dir string) error {
	var err error
	for range 20 {
		if err = os.MkdirAll(dir, 0o755); !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return err
}

// writeCgroupFile writes value to an existing cgroup file (a cgroup
// file system cannot create files: a missing one is os.ErrNotExist).
func writeCgroupFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	return errors.Join(err, f.Close())
}

// oomWatch is an eventfd the kernel signals when a cgroup v1 memory
// cgroup (or an ancestor) runs out of memory, and when it is removed.
type oomWatch struct{ efd int }

// watchOOM registers an OOM notification for the memory cgroup dir.
func watchOOM(dir string) (*oomWatch, error) {
	ofd, err := unix.Open(filepath.Join(dir, "memory.oom_control"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("oom notification: %w", err)
	}
	// The kernel keeps what it needs of memory.oom_control once the
	// registration is written.
	defer unix.Close(ofd)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("oom notification: eventfd: %w", err)
	}
	reg := strconv.Itoa(efd) + " " + strconv.Itoa(ofd)
	if err := writeCgroupFile(filepath.Join(dir, "cgroup.event_control"), reg); err != nil {
		unix.Close(efd)
		return nil, fmt.Errorf("oom notification: register: %w", err)
	}
	return &oomWatch{efd: efd}, nil
}

// fired reports whether the kernel signalled the watch. Ask before the
// cgroup is removed: the removal signals it too.
func (w *oomWatch) fired() bool {
	if w == nil {
		return false
	}
	var buf [8]byte
	n, err := unix.Read(w.efd, buf[:])
	return err == nil && n == 8 && binary.NativeEndian.Uint64(buf[:]) > 0
}

// close releases the watch; a nil watch is fine.
func (w *oomWatch) close() error {
	if w == nil {
		return nil
	}
	return unix.Close(w.efd)
}

func ptr[T any](v T) *T { return &v }
