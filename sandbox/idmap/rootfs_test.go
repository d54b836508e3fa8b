package idmap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestCheckRootfs refuses a rootfs whose /dev, /proc or a mount
// destination's component is a symbolic link, and accepts links below a
// tmpfs mount (hidden) and a rootfs of real directories.
func TestCheckRootfs(t *testing.T) {
	mounts := []specs.Mount{{Destination: "/dev", Type: "tmpfs"}, {Destination: "/proc", Type: "proc"}, {Destination: "/work/ws", Type: "bind"}}
	for _, c := range []struct {
		name, link, target string
		refused            bool
	}{
		{"clean", "", "", false},
		{"dev", "dev", "/tmp", true},
		{"proc", "proc", "/tmp", true},
		{"bind parent", "work", "/etc", true},
		{"relative dev", "dev", "../../..", true},
		{"dev/null below the /dev tmpfs", "dev/null", "/proc/sys/kernel/core_pattern", false},
		{"elsewhere", "opt", "/etc", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range []string{"dev", "proc", "sys", "work/ws", "opt"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if c.link != "" {
				p := filepath.Join(root, c.link)
				if err := os.RemoveAll(p); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(c.target, p); err != nil {
					t.Fatal(err)
				}
			}
			err := CheckRootfs(root, mounts)
			if c.refused && (err == nil || !strings.Contains(err.Error(), "/"+c.link+" is a symbolic link")) {
				t.Errorf("CheckRootfs = %v, want a refusal naming /%s", err, c.link)
			}
			if !c.refused && err != nil {
				t.Errorf("CheckRootfs = %v, want nil", err)
			}
		})
	}
}
