package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// OOMKilled reports whether the out-of-memory killer killed a process in
// one of the cgroup directories dirs: the "oom_kill" count of cgroup v1's
// memory.oom_control or cgroup v2's memory.events is above zero. A
// directory without those files (not the memory controller's) says
// nothing. Backends read it after the call's processes exited and before
// its cgroups are removed.
func OOMKilled(dirs []string) bool {
	for _, d := range dirs {
		for _, name := range []string{"memory.oom_control", "memory.events"} {
			if oomKillCount(filepath.Join(d, name)) > 0 {
				return true
			}
		}
	}
	return false
}

// oomKillCount returns the value of the "oom_kill" line of a memory
// cgroup file, or 0 when the file or the line is missing.
func oomKillCount(file string) uint64 {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}
