package driver

import (
	"errors"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestCanonicalImageCase: names come back canonical; an invalid name, and
// the host image's, are invalid arguments naming the backend and field.
func TestCanonicalImageCase(t *testing.T) {
	for _, tt := range []struct {
		name, want, err string
		ref             bool
	}{
		{name: "docker.io/library/alpine", want: "alpine:latest"},
		{name: "alpine@sha256:" + strings.Repeat("a", 64), want: "alpine@sha256:" + strings.Repeat("a", 64), ref: true},
		{name: "host", err: `docker: policy.image "host": the host image exists only for the oci backend`},
		{name: "host", err: "docker: policy.image: ", ref: true},
		{name: "Bad Name", err: "docker: policy.image: "},
		{name: "Bad Name", err: "docker: policy.image: ", ref: true},
	} {
		f := CanonicalImage
		if tt.ref {
			f = CanonicalRef
		}
		got, err := f("docker", "policy.image", tt.name)
		if tt.err == "" {
			if err != nil || got != tt.want {
				t.Errorf("CanonicalImage/Ref(%q, ref %v) = %q, %v; want %q", tt.name, tt.ref, got, err, tt.want)
			}
			continue
		}
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.HasPrefix(err.Error(), tt.err) {
			t.Errorf("CanonicalImage/Ref(%q, ref %v) = %q, %v; want ErrInvalid starting %q", tt.name, tt.ref, got, err, tt.err)
		}
	}
}
