//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/quota"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/quota/quotatest"
)

// TestWorkspaceQuota: a policy with limits.workspaceBytes on a workspace
// whose file system has no project quotas is refused before anything
// runs (exit 125 naming the field), while the same policy without the
// bound runs; on ext4 with project quotas made on a loop device, a real
// call (oci with runc and crun) writes 512 KiB under a 1 MiB bound and
// gets EDQUOT ("Disk quota exceeded") for 2 MiB more. On a kernel that
// cannot mount such a file system (no CONFIG_QFMT_V2) it checks the
// refusal and the unbounded variant on a plain ext4 loop device instead.
func TestWorkspaceQuota(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	dir := t.TempDir()
	bounded := filepath.Join(dir, "bounded.yaml")
	if err := os.WriteFile(bounded, []byte("name: bounded\nworkspace: rw\nimage: host\nlimits: {workspaceBytes: 1Mi}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, runtime := range []string{"runc", "crun"} {
		t.Run(runtime+"/refused-without-quotas", func(t *testing.T) {
			if err := quota.Check(e.workspace); err == nil {
				t.Skipf("the test's workspace %s enforces project quotas: nothing to refuse", e.workspace)
			}
			marker := filepath.Join(e.workspace, "ran-"+runtime)
			r := run(t, nil, append(append([]string{"exec"}, e.flags("")...), "--policy", bounded, "--runtime", runtime, "--", "touch ran-"+runtime)...)
			if r.code != 125 || !strings.Contains(r.stderr, "policy.limits.workspaceBytes cannot be enforced") {
				t.Errorf("bounded call on a file system without project quotas = exit %d, stderr %q; want 125 naming policy.limits.workspaceBytes", r.code, r.stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("the refused call ran (%s exists)", marker)
			}
			// The legitimate variant: the same workspace without the bound.
			r = run(t, nil, append(append([]string{"exec"}, e.flags("")...), "--policy", "workspace-write", "--runtime", runtime, "--", "touch ran-"+runtime)...)
			if r.code != 0 {
				t.Errorf("unbounded call = exit %d, stderr %q; want 0", r.code, r.stderr)
			}
			if _, err := os.Stat(marker); err != nil {
				t.Errorf("the unbounded call did not run: %v", err)
			}
		})
	}
	mnt, err := quotatest.LoopFS(t, quotatest.ProjectQuotaMkfs, quotatest.ProjectQuotaMount)
	if err != nil {
		// This kernel cannot mount ext4 with project quotas (the CI
		// machines' lacks CONFIG_QFMT_V2): what holds there is the
		// refusal on a plain ext4 made the same way, for the workspace's
		// owner; TestWorkspaceQuotaBtrfs covers EDQUOT.
		plain := quotatest.PlainExt4(t, err)
		for _, d := range []string{filepath.Dir(filepath.Dir(plain)), filepath.Dir(plain)} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		ws := filepath.Join(plain, "ws")
		if err := os.Mkdir(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(ws, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		exec := func(policy string) result {
			return run(t, nil, "exec", "--home", e.home, "--sessions-root", e.root, "--cwd", ws, "--state-dir", e.state, "--data-dir", e.data,
				"--policy", policy, "--", "touch ran-"+filepath.Base(policy))
		}
		if r := exec(bounded); r.code != 125 || !strings.Contains(r.stderr, "policy.limits.workspaceBytes cannot be enforced") {
			t.Errorf("bounded call on a plain ext4 = exit %d, stderr %q; want 125 naming policy.limits.workspaceBytes", r.code, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(ws, "ran-bounded.yaml")); err == nil {
			t.Error("the refused call ran")
		}
		if r := exec("workspace-write"); r.code != 0 {
			t.Errorf("unbounded call on a plain ext4 = exit %d, stderr %q; want 0", r.code, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(ws, "ran-workspace-write")); err != nil {
			t.Errorf("the unbounded call did not run: %v", err)
		}
		return
	}
	for _, d := range []string{filepath.Dir(filepath.Dir(mnt)), filepath.Dir(mnt)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	for _, runtime := range []string{"runc", "crun"} {
		t.Run(runtime+"/edquot", func(t *testing.T) {
			ws := filepath.Join(mnt, "ws-"+runtime)
			if err := os.Mkdir(ws, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(ws, 1000, 1000); err != nil {
				t.Fatal(err)
			}
			args := []string{"exec", "--home", e.home, "--sessions-root", e.root, "--cwd", ws, "--state-dir", e.state, "--data-dir", e.data,
				"--policy", bounded, "--runtime", runtime, "--",
				"head -c 524288 /dev/zero > small && echo small=ok; head -c 2097152 /dev/zero > big; echo big=$?"}
			r := run(t, nil, args...)
			if r.code != 0 || !strings.Contains(r.stdout, "small=ok") {
				t.Fatalf("bounded call = exit %d, stdout %q, stderr %q; want the 512 KiB write to succeed", r.code, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout, "big=0") || !strings.Contains(r.stderr, "Disk quota exceeded") {
				t.Errorf("the 2 MiB write past a 1 MiB bound: stdout %q, stderr %q; want it to fail with Disk quota exceeded (EDQUOT)", r.stdout, r.stderr)
			}
			u, err := quota.Get(ws)
			if err != nil || u.LimitBytes != 1<<20 || u.UsedBytes > 1<<20 {
				t.Errorf("the workspace's project: %+v, %v; want a 1 MiB limit, at most 1 MiB used", u, err)
			}
			fmt.Fprintf(os.Stderr, "quota: %s: project %d holds %d of %d bytes\n", runtime, u.Project, u.UsedBytes, u.LimitBytes)
		})
	}
}

// TestWorkspaceQuotaBtrfs: on a btrfs made on a loop device with quota
// enabled, a real call (oci with runc and crun) in a workspace that is a
// subvolume bounded to 8 MiB by limits.workspaceBytes writes 1 MiB and
// gets EDQUOT ("Disk quota exceeded") for 64 MiB more, and cannot make a
// subvolume or snapshot there to escape the bound; a workspace that
// is a plain directory inside that subvolume, and a subvolume of a btrfs
// without quota, are refused before anything runs (exit 125 naming the
// field), while the same workspace without the bound runs.
func TestWorkspaceQuotaBtrfs(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	bounded := filepath.Join(t.TempDir(), "bounded.yaml")
	if err := os.WriteFile(bounded, []byte("name: bounded\nworkspace: rw\nimage: host\nlimits: {workspaceBytes: 8Mi}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withQuota := quotatest.Btrfs(t, true)
	withoutQuota := quotatest.Btrfs(t, false)
	for _, mnt := range []string{withQuota, withoutQuota} {
		for _, d := range []string{filepath.Dir(filepath.Dir(mnt)), filepath.Dir(mnt)} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	call := func(t *testing.T, ws, policy, runtime, script string) result {
		t.Helper()
		return run(t, nil, "exec", "--home", e.home, "--sessions-root", e.root, "--cwd", ws, "--state-dir", e.state, "--data-dir", e.data,
			"--policy", policy, "--runtime", runtime, "--", script)
	}
	subvolume := func(t *testing.T, path string) {
		t.Helper()
		quotatest.Subvolume(t, path)
		if err := os.Chown(path, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	for _, runtime := range []string{"runc", "crun"} {
		t.Run(runtime+"/edquot", func(t *testing.T) {
			ws := filepath.Join(withQuota, "ws-"+runtime)
			subvolume(t, ws)
			r := call(t, ws, bounded, runtime, "head -c 1048576 /dev/zero > small && echo small=ok; head -c 67108864 /dev/zero > big; echo big=$?; sync big")
			if r.code != 0 || !strings.Contains(r.stdout, "small=ok") {
				t.Fatalf("bounded call = exit %d, stdout %q, stderr %q; want the 1 MiB write to succeed", r.code, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout, "big=0") || !strings.Contains(r.stderr, "Disk quota exceeded") {
				t.Errorf("the 64 MiB write past an 8 MiB bound: stdout %q, stderr %q; want it to fail with Disk quota exceeded (EDQUOT)", r.stdout, r.stderr)
			}
			// A subvolume made inside the workspace would have a qgroup of
			// its own, outside the bound: the seccomp profile refuses it (with
			// room under the bound: in a full workspace btrfs refuses it too),
			// while other ioctls (lsattr's FS_IOC_GETFLAGS) still work.
			r = call(t, ws, bounded, runtime, "rm big && sync; lsattr -d . >/dev/null && echo ioctl=ok; btrfs subvolume create sub; echo sub=$?; btrfs subvolume snapshot . snap; echo snap=$?")
			t.Logf("subvolume and snapshot in the workspace: stdout %q, stderr %q", r.stdout, r.stderr)
			if !strings.Contains(r.stdout, "ioctl=ok") || strings.Contains(r.stdout, "sub=0") || strings.Contains(r.stdout, "snap=0") {
				t.Errorf("subvolume and snapshot in the workspace: stdout %q, stderr %q; want both refused, lsattr to work", r.stdout, r.stderr)
			}
			for _, p := range []string{"sub", "snap"} {
				if _, err := os.Stat(filepath.Join(ws, p)); err == nil {
					t.Errorf("the call made %s in the workspace", p)
				}
			}
			u, err := quota.Get(ws)
			if err != nil || u.LimitBytes != 8<<20 || u.UsedBytes > 8<<20 || u.UsedBytes < 1<<20 {
				t.Errorf("the workspace's qgroup: %+v, %v; want an 8 MiB limit, between 1 and 8 MiB referenced", u, err)
			}
			fmt.Fprintf(os.Stderr, "quota: btrfs %s: qgroup 0/%d references %d of %d bytes\n", runtime, u.Qgroup, u.UsedBytes, u.LimitBytes)
		})
		for name, ws := range map[string]string{
			"refused-inside-subvolume": filepath.Join(withQuota, "shared-"+runtime, "ws"),
			"refused-without-quota":    filepath.Join(withoutQuota, "ws-"+runtime),
		} {
			why := map[string]string{"refused-inside-subvolume": "not the root of one", "refused-without-quota": "btrfs quota enable"}[name]
			t.Run(runtime+"/"+name, func(t *testing.T) {
				if strings.HasPrefix(name, "refused-inside") {
					subvolume(t, filepath.Dir(ws))
					if err := os.Mkdir(ws, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.Chown(ws, 1000, 1000); err != nil {
						t.Fatal(err)
					}
				} else {
					subvolume(t, ws)
				}
				r := call(t, ws, bounded, runtime, "touch ran")
				if r.code != 125 || !strings.Contains(r.stderr, "policy.limits.workspaceBytes cannot be enforced") || !strings.Contains(r.stderr, why) {
					t.Errorf("bounded call = exit %d, stderr %q; want 125 naming policy.limits.workspaceBytes and %q", r.code, r.stderr, why)
				}
				if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
					t.Errorf("the refused call ran")
				}
				r = call(t, ws, "workspace-write", runtime, "touch ran")
				if r.code != 0 {
					t.Errorf("unbounded call = exit %d, stderr %q; want 0", r.code, r.stderr)
				}
				if _, err := os.Stat(filepath.Join(ws, "ran")); err != nil {
					t.Errorf("the unbounded call did not run: %v", err)
				}
			})
		}
	}
}
