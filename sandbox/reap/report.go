package reap

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Report lists what a backend's Reap removed: what dead instances
// (their lock no longer held) left behind. Every backend returns this one
// type; a kind of object a backend does not have stays empty. Entries are
// container or object ids, snapshot keys, call ids or absolute paths, as
// each field says. It marshals every field, an empty one as [], so that
// `dsh-sandbox reap --json` has one shape whatever the backend.
type Report struct {
	// Instances are the dead instances whose leftovers were removed;
	// the reaping executor's own instance is never listed.
	Instances []string `json:"instances"`
	// Containers are the ids of the containers removed (with their task
	// and, on containerd, their snapshot).
	Containers []string `json:"containers"`
	// Bundles are the bundle directories removed (oci).
	Bundles []string `json:"bundles"`
	// Snapshots are the keys of orphaned snapshots removed (containerd).
	Snapshots []string `json:"snapshots"`
	// Images are the ids of images without a name that were removed:
	// images an import made that lost their name to a later import while
	// a container still used them (docker).
	Images []string `json:"images"`
	// Mounts are the mount points unmounted (oci, docker: staging mounts)
	// or the call ids whose staging mounts were removed (containerd).
	Mounts []string `json:"mounts"`
	// Cgroups are the cgroup directories removed (oci, containerd).
	Cgroups []string `json:"cgroups"`
	// Files are other state files removed, by absolute path (docker: the
	// FIFO a call with a network allowlist waits on; oci: the spill files
	// of a dead call without a session directory).
	Files []string `json:"files"`
}

// reapKind is one kind of removed object and its entries.
type reapKind struct {
	name string
	ids  []string
}

// kinds are the kinds of removed objects, in the order Removed counts
// and String lists them.
func (r Report) kinds() []reapKind {
	return []reapKind{
		{"containers", r.Containers}, {"bundles", r.Bundles}, {"snapshots", r.Snapshots},
		{"unnamed images", r.Images}, {"mounts", r.Mounts}, {"cgroups", r.Cgroups},
		{"files", r.Files},
	}
}

// Removed is the number of objects removed: every entry but the
// instances.
func (r Report) Removed() int {
	n := 0
	for _, k := range r.kinds() {
		n += len(k.ids)
	}
	return n
}

// Empty reports whether Reap found nothing to remove.
func (r Report) Empty() bool { return len(r.Instances) == 0 && r.Removed() == 0 }

// String says for people what r lists: the count of each kind removed,
// then the dead instances, e.g. "2 containers, 1 bundles; 1 dead
// instances".
func (r Report) String() string {
	var parts []string
	for _, k := range r.kinds() {
		if len(k.ids) > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", len(k.ids), k.name))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing removed")
	}
	return fmt.Sprintf("%s; %d dead instances", strings.Join(parts, ", "), len(r.Instances))
}

// MarshalJSON writes every field, an empty one as [].
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	for _, l := range []*[]string{&r.Instances, &r.Containers, &r.Bundles, &r.Snapshots, &r.Images, &r.Mounts, &r.Cgroups, &r.Files} {
		if *l == nil {
			*l = []string{}
		}
	}
	return json.Marshal(plain(r))
}
