package docker

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestEngineMountsFollowPlan: for every workspace and transcript mode,
// with and without a session and extra mounts, the engine's container
// configuration (HostConfig.Tmpfs and Mounts from engineMounts) and the
// staging mounts' flags (stageFlags) hold exactly the call's plan
// (policy.Plan): each tmpfs with its mode and owner, each bind from its
// staging mount, read-only, nosuid, nodev and noexec as planned.
func TestEngineMountsFollowPlan(t *testing.T) {
	sessions := []sandbox.Session{{}, {ID: "s1", Cwd: "/srv/ws", TranscriptDir: "/srv/sessions/s1"}}
	for _, ws := range sandbox.WorkspaceModes {
		for _, tr := range sandbox.TranscriptModes {
			for _, extra := range []bool{false, true} {
				for _, s := range sessions {
					p := testPolicy(t)
					p.Workspace, p.Transcript = ws, tr
					if extra {
						p.Mounts = []sandbox.Mount{{Source: "/var/cache/x", Target: "/cache"}, {Source: "/srv/ref/a", Target: "/ref", ReadOnly: true, FromRoot: true}}
						p.Tmpfs = append(p.Tmpfs, sandbox.Tmpfs{Target: "/scratch", SizeBytes: 1 << 20})
					}
					name := string(ws) + "/" + string(tr) + "/extra=" + strconv.FormatBool(extra) + "/cwd=" + s.Cwd
					checkEngineMounts(t, name, p, s)
				}
			}
		}
	}
}

func checkEngineMounts(t *testing.T, name string, p sandbox.Policy, s sandbox.Session) {
	t.Helper()
	id := policy.Identity{UID: 1000, GID: 1000}
	plan, err := policy.Plan(p, s, id)
	if err != nil {
		t.Fatalf("%s: Plan() = %v", name, err)
	}
	ms, err := policy.Mounts(p, s, id.UID, id.GID)
	if err != nil {
		t.Fatalf("%s: Mounts() = %v", name, err)
	}
	var binds []stagedBind
	for i, m := range ms {
		if m.Type == "bind" {
			binds = append(binds, stagedBind{Source: "/state/docker-binds/i/c/" + strconv.Itoa(i), Target: m.Destination})
		}
	}
	tmpfs, mounts, err := engineMounts("c", ms, binds)
	if err != nil {
		t.Fatalf("%s: engineMounts() = %v", name, err)
	}
	pb := plan.Binds()
	if len(mounts) != len(pb) || len(tmpfs)+len(mounts) != len(plan.Mounts) {
		t.Fatalf("%s: engine mounts %+v tmpfs %q, want the plan's %+v", name, mounts, tmpfs, plan.Mounts)
	}
	bi := 0
	for i, m := range plan.Mounts {
		if !m.Bind() {
			opts := strings.Split(tmpfs[m.Target], ",")
			want := []string{"rw", "exec", "nosuid", "nodev", "mode=" + map[bool]string{true: "1777", false: "0755"}[m.Owner == nil]}
			if m.Owner != nil {
				want = append(want, "uid=1000", "gid=1000")
			} else {
				want = append(want, "uid=0", "gid=0")
			}
			if m.SizeBytes > 0 {
				want = append(want, "size="+strconv.FormatInt(m.SizeBytes, 10))
			}
			for _, w := range want {
				if !slices.Contains(opts, w) {
					t.Errorf("%s: tmpfs %s options %q lack %q", name, m.Target, opts, w)
				}
			}
			continue
		}
		em := mounts[bi]
		bi++
		if em.Target != m.Target || em.Type != mount.TypeBind || em.ReadOnly || em.BindOptions == nil || !em.BindOptions.NonRecursive ||
			em.BindOptions.Propagation != mount.PropagationRPrivate || !strings.HasPrefix(em.Source, "/state/docker-binds/") {
			t.Errorf("%s: engine mount %+v, want a private, non-recursive bind of a staging mount at %s", name, em, m.Target)
		}
		f := stageFlags(ms[i])
		if ms[i].Source != m.Source {
			t.Errorf("%s: staged source %s, want the plan's %s", name, ms[i].Source, m.Source)
		}
		for _, c := range []struct {
			flag uintptr
			want bool
			what string
		}{
			{unix.MS_NOSUID, m.NoSuid, "nosuid"}, {unix.MS_NODEV, m.NoDev, "nodev"},
			{unix.MS_NOEXEC, m.NoExec, "noexec"}, {unix.MS_RDONLY, !m.Writable, "read-only"},
		} {
			if (f&c.flag != 0) != c.want {
				t.Errorf("%s: staging mount of %s (%s): %s %v, want %v", name, m.Target, m.Kind, c.what, f&c.flag != 0, c.want)
			}
		}
	}
}
