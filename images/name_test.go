package images

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateNameCases(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"busybox", true},
		{"busybox:latest", true},
		{"host", true},
		{"a", true},
		{"my-image.v2_x", true},
		{"a__b", true},
		{"a---b", true},
		{"img:V1.2-rc_3", true},
		{"img:_x", true},
		{"myorg/tools:1", true},
		{"myorg/sub/tools", true},
		{"registry.example:5000/myorg/tools:1", true},
		{"registry.example/tools", true},
		{"localhost/tools:2", true},
		{"localhost:5000/tools", true},
		{"Registry.Example/tools", true},
		{"docker.io/library/busybox:1.36", true},
		{strings.Repeat("a", 255), true},
		{strings.Repeat("a", 256), false},
		{"img:" + strings.Repeat("t", 128), true},
		{"img:" + strings.Repeat("t", 129), false},
		{"", false},
		{"Busybox", false},
		{"myorg/Tools", false},
		{"-busybox", false},
		{".busybox", false},
		{"busybox-", false},
		{"a..b", false},
		{"a___b", false},
		{"a.-b", false},
		{"..", false},
		{"../etc", false},
		{"a/../b", false},
		{"a//b", false},
		{"/a", false},
		{"a/", false},
		{"img:", false},
		{"img:.x", false},
		{"img:-x", false},
		{"img:a:b", false},
		{"img:a/b", false},
		{":tag", false},
		{"registry.example:/x", false},
		{"registry.example:50a/x", false},
		{"-registry.example/x", false},
		{"reg_istry.example/x", false},
		{"busybox@sha256:" + strings.Repeat("a", 64), false},
		{"busybox:1@sha256:" + strings.Repeat("a", 64), false},
		{"img name", false},
		{"img\x00", false},
		{"img\n", false},
		{"a+b", false},
		{"a~b", false},
		{"ümlaut", false},
		{"$(id)", false},
	}
	for _, tt := range tests {
		err := ValidateName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "name ")) {
			t.Errorf("ValidateName(%q) = %v, want an error wrapping ErrInvalid that quotes the name", tt.name, err)
		}
	}
}

func TestCanonicalNameCases(t *testing.T) {
	tests := []struct {
		name, want string
	}{
		{"busybox", "busybox:latest"},
		{"bb2", "bb2:latest"},
		{"bb2:latest", "bb2:latest"},
		{"busybox:1.36", "busybox:1.36"},
		{"host", "host"},
		{"host:x", "host:x"},
		{"myorg/tools:1", "myorg/tools:1"},
		{"myorg/tools", "myorg/tools:latest"},
		{"registry.example:5000/myorg/tools:1", "registry.example:5000/myorg/tools:1"},
		{"registry.example:5000/myorg/tools", "registry.example:5000/myorg/tools:latest"},
		{"docker.io/library/bb2", "bb2:latest"},
		{"index.docker.io/library/bb2:3", "bb2:3"},
		{"library/bb2", "bb2:latest"},
		{"docker.io/bb2", "bb2:latest"},
		{"docker.io/myorg/tools:1", "myorg/tools:1"},
		{"docker.io/library/a/b", "library/a/b:latest"},
		{"docker.io/foo.bar/x", "docker.io/foo.bar/x:latest"},
		{"registry.example/library/x", "registry.example/library/x:latest"},
	}
	for _, tt := range tests {
		got, err := CanonicalName(tt.name)
		if err != nil || got != tt.want {
			t.Errorf("CanonicalName(%q) = %q, %v, want %q", tt.name, got, err, tt.want)
		}
		// Canonical names are fixed points.
		if again, err := CanonicalName(got); err != nil || again != got {
			t.Errorf("CanonicalName(%q) = %q, %v, want it unchanged", got, again, err)
		}
	}
	for _, bad := range []string{"Bad", "a@sha256:00", "../x"} {
		if got, err := CanonicalName(bad); err == nil {
			t.Errorf("CanonicalName(%q) = %q, nil, want an error", bad, got)
		}
	}
}

func TestRepoDirCases(t *testing.T) {
	for _, repo := range []string{"busybox", "myorg/tools", "registry.example:5000/myorg/tools", "localhost/x"} {
		dir := repoDir(repo)
		if strings.ContainsAny(dir, "/:,") {
			t.Errorf("repoDir(%q) = %q, want no '/', ':' or ','", repo, dir)
		}
		if got, ok := dirRepo(dir); !ok || got != repo {
			t.Errorf("dirRepo(repoDir(%q)) = %q, %v, want %q, true", repo, got, ok, repo)
		}
	}
	for _, dir := range []string{".tmp", "Busybox", "a~b", "a+", "+a", "docker.io+library+x", "host~1", "a+b~c"} {
		if got, ok := dirRepo(dir); ok {
			t.Errorf("dirRepo(%q) = %q, true, want false (not a canonical repository)", dir, got)
		}
	}
}

func TestHasOverlayLowerCases(t *testing.T) {
	const info = "100 90 0:50 / /run/b/rootfs rw,relatime - overlay overlay rw,lowerdir=/s/img/1/rootfs:/s/other,upperdir=/b/upper,workdir=/b/work\n" +
		"101 90 8:1 /s/img/2/rootfs /mnt rw - ext4 /dev/sda1 rw\n"
	for _, tc := range []struct {
		lower string
		want  bool
	}{
		{"/s/img/1/rootfs", true},
		{"/s/other", true},
		{"/s/img/1", false},
		{"/s/img/2/rootfs", false},
		{"/b/upper", false},
	} {
		if got := hasOverlayLower(info, tc.lower); got != tc.want {
			t.Errorf("hasOverlayLower(mountinfo, %q) = %v, want %v", tc.lower, got, tc.want)
		}
	}
}
