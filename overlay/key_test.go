package overlay

import "testing"

func TestValidKeyCase(t *testing.T) {
	cases := []struct {
		key  string
		want bool
	}{
		{"DSH_HOME", true},
		{"DSH_A", true},
		{"DSH_A1_B2", true},
		{"DSH_A__", true},
		{"DSH_", false},
		{"DSH", false},
		{"", false},
		{"dsh_home", false},
		{"Dsh_HOME", false},
		{"DSH_home", false},
		{"DSH_1A", false},
		{"DSH__A", false},
		{"DSH_A-B", false},
		{"DSH_A.B", false},
		{"DSH_A B", false},
		{"DSH_A=B", false},
		{"DSH_A\x00", false},
		{"DSH_A\n", false},
		{" DSH_A", false},
		{"XDSH_A", false},
		{"DSH_Ä", false},
		{"DSH_\u0130", false}, // dotted capital I: upper case, but not ASCII
		{"PATH", false},
	}
	for _, c := range cases {
		if got := ValidKey(c.key); got != c.want {
			t.Errorf("ValidKey(%q) = %v, want %v", c.key, got, c.want)
		}
	}
}

func TestReservedCase(t *testing.T) {
	cases := []struct {
		key  string
		want bool
	}{
		{KeyHome, true},
		{KeyShell, true},
		{KeySessionID, true},
		{KeySessionJSONL, true},
		{"DSH_HOME_EXTRA", false},
		{"dsh_home", false},
		{"DSH_TOOL", false},
	}
	for _, c := range cases {
		if got := Reserved(c.key); got != c.want {
			t.Errorf("Reserved(%q) = %v, want %v", c.key, got, c.want)
		}
	}
}

func TestBuiltInKeysSortedAndReserved(t *testing.T) {
	for i, b := range builtInKeys {
		if !Reserved(b.Key) || !ValidKey(b.Key) {
			t.Errorf("builtInKeys[%d] = %q, want a valid reserved key", i, b.Key)
		}
		if i > 0 && builtInKeys[i-1].Key >= b.Key {
			t.Errorf("builtInKeys not sorted at %d: %q after %q", i, b.Key, builtInKeys[i-1].Key)
		}
	}
}
