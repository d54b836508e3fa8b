package sandbox

import (
	"strings"
	"testing"
)

func TestValidCallID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"call-0a1b", true},
		{"A", true},
		{"9_x.y-z", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{".", false},
		{"..", false},
		{".hidden", false},
		{"-flag", false},
		{"_x", false},
		{"a/b", false},
		{"a b", false},
		{"a\x00", false},
		{"é", false},
	}
	for _, tt := range tests {
		if got := ValidCallID(tt.id); got != tt.want {
			t.Errorf("ValidCallID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}
