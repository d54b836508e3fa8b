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
		{"img:V1.2-rc_3", true},
		{"img:_x", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"img:" + strings.Repeat("t", 128), true},
		{"img:" + strings.Repeat("t", 129), false},
		{"", false},
		{"Busybox", false},
		{"-busybox", false},
		{".busybox", false},
		{"..", false},
		{"../etc", false},
		{"a/b", false},
		{"img:", false},
		{"img:.x", false},
		{"img:-x", false},
		{"img:a:b", false},
		{"img:a/b", false},
		{":tag", false},
		{"img name", false},
		{"img\x00", false},
		{"ümlaut", false},
	}
	for _, tt := range tests {
		err := ValidateName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v, want an error wrapping ErrInvalid", tt.name, err)
		}
	}
}

func TestCanonicalNameCases(t *testing.T) {
	tests := []struct {
		name, want string
	}{
		{"busybox", "busybox:latest"},
		{"busybox:1.36", "busybox:1.36"},
		{"host", "host"},
		{"host:x", "host:x"},
	}
	for _, tt := range tests {
		got, err := CanonicalName(tt.name)
		if err != nil || got != tt.want {
			t.Errorf("CanonicalName(%q) = %q, %v, want %q", tt.name, got, err, tt.want)
		}
	}
	if got, err := CanonicalName("Bad"); err == nil {
		t.Errorf("CanonicalName(%q) = %q, nil, want an error", "Bad", got)
	}
}
