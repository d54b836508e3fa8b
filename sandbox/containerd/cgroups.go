package containerd

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupParent is the cgroup directory, below the root of every
// hierarchy, that holds one directory per executor instance, which holds
// one directory per call: /dsh-sandbox-containerd/<instance>/<call>. The
// runc shim creates the call's directories from the spec's cgroupsPath
// and removes them when the task is deleted; the executor removes its
// instance directory, and the parent when it is empty, at Close, and
// Reap those of dead instances.
const cgroupParent = "dsh-sandbox-containerd"

// cgroupsPath is the spec's linux.cgroupsPath of a call.
func cgroupsPath(instance, callID string) string {
	return "/" + cgroupParent + "/" + instance + "/" + callID
}

// cgroupMounts returns the mount points of this host's cgroup
// hierarchies whose root is the hierarchy's root (v1 controllers and the
// cgroup2 mount), from /proc/self/mountinfo.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fs, ps := strings.Fields(pre), strings.Fields(post)
		if len(fs) < 5 || len(ps) < 1 || (ps[0] != "cgroup" && ps[0] != "cgroup2") || fs[3] != "/" {
			continue
		}
		point, err := strconv.Unquote(`"` + strings.ReplaceAll(fs[4], `"`, `\"`) + `"`)
		if err != nil {
			point = fs[4]
		}
		out = append(out, point)
	}
	return out, sc.Err()
}

// cgroupDirs returns the directories of cgroup path p (absolute, as in a
// spec) in every hierarchy that has it.
func cgroupDirs(p string) []string {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range mounts {
		d := filepath.Join(m, filepath.FromSlash(path.Clean("/"+p)))
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// killCgroup sends SIGKILL to every process of cgroup path p (in every
// hierarchy, so a process moved out of one is still found), repeating
// until the cgroups are empty or a few seconds have passed, and reports
// how many distinct PIDs it signalled. It is how a call whose daemon went
// away stops its command: the runc shim outlives the daemon and would
// keep the command running with no one to report its outcome to.
func killCgroup(p string) (int, error) {
	killed := map[int]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := cgroupPIDs(p)
		if err != nil {
			return len(killed), err
		}
		if len(pids) == 0 {
			return len(killed), nil
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed[pid] = true
			}
		}
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("cgroup %s: processes %v survive SIGKILL", p, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupPIDs lists the processes of cgroup path p and its descendants in
// every hierarchy, without duplicates.
func cgroupPIDs(p string) ([]int, error) {
	seen := map[int]bool{}
	var pids []int
	var errs []error
	for _, d := range cgroupDirs(p) {
		err := filepath.WalkDir(d, func(q string, ent os.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			if !ent.IsDir() {
				return nil
			}
			data, err := os.ReadFile(filepath.Join(q, "cgroup.procs"))
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("cgroup %s: %w", d, err))
		}
	}
	return pids, errors.Join(errs...)
}

// removeCgroup removes the directories of cgroup path p, deepest first,
// in every hierarchy. A missing directory is no error; a busy one is
// retried for a moment (a killed process leaves its cgroup shortly after
// it dies).
func removeCgroup(p string) error {
	var errs []error
	for _, d := range cgroupDirs(p) {
		var dirs []string
		_ = filepath.WalkDir(d, func(q string, ent os.DirEntry, err error) error {
			if err == nil && ent.IsDir() {
				dirs = append(dirs, q)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdirRetry(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func rmdirRetry(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: remove: %w", dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeInstanceCgroups removes what is left of the instance's cgroup
// directories (those of calls whose teardown could not remove them
// included) unless a process still runs in one, and then the shared
// parent where it is empty. It reports whether none of the instance's
// directories remains. Only for an instance with no call in progress.
func removeInstanceCgroups(instance string) bool {
	p := "/" + cgroupParent + "/" + instance
	if pids, err := cgroupPIDs(p); err == nil && len(pids) == 0 {
		_ = removeCgroup(p)
	}
	removeEmptyCgroupParent()
	return len(cgroupDirs(p)) == 0
}

// removeEmptyCgroupParent removes cgroupParent in every hierarchy where
// it is empty; where another instance still uses it, it stays.
func removeEmptyCgroupParent() {
	for _, d := range cgroupDirs("/" + cgroupParent) {
		_ = syscall.Rmdir(d)
	}
}

// cgroupInstances lists the instance directories under cgroupParent in
// any hierarchy.
func cgroupInstances() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range cgroupDirs("/" + cgroupParent) {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, ent := range ents {
			if ent.IsDir() && !seen[ent.Name()] {
				seen[ent.Name()] = true
				out = append(out, ent.Name())
			}
		}
	}
	return out
}
