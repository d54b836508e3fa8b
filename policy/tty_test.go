package policy

import (
	"strings"
	"testing"
)

// TestParseTTY: tty: false refuses terminals; absent and true allow them;
// a value that is not a boolean is refused naming the key; Format keeps
// the refusal and Explain states it.
func TestParseTTY(t *testing.T) {
	tests := []struct {
		doc      string
		wantDeny bool
	}{
		{"{}", false},
		{"tty: true", false},
		{"tty: false", true},
	}
	for _, tt := range tests {
		p, err := Parse([]byte(tt.doc))
		if err != nil {
			t.Fatalf("Parse(%q) = %v", tt.doc, err)
		}
		if p.DenyTTY != tt.wantDeny {
			t.Errorf("Parse(%q).DenyTTY = %v, want %v", tt.doc, p.DenyTTY, tt.wantDeny)
		}
		out, err := Format(p)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(out)
		if err != nil || back.DenyTTY != tt.wantDeny || back.Digest != p.Digest {
			t.Errorf("Parse(Format(Parse(%q))) = DenyTTY %v, digest %s, %v; want %v, %s", tt.doc, back.DenyTTY, back.Digest, err, tt.wantDeny, p.Digest)
		}
		explained := Explain(p)
		if got := strings.Contains(explained, "terminal: refused (tty: false)"); got != tt.wantDeny {
			t.Errorf("Explain(%q) says refused = %v, want %v:\n%s", tt.doc, got, tt.wantDeny, explained)
		}
	}
	allow, _ := Parse([]byte("{}"))
	deny, _ := Parse([]byte("tty: false"))
	if allow.Digest == deny.Digest {
		t.Errorf("tty: false has the digest of the default policy")
	}
	if _, err := Parse([]byte(`tty: "no"`)); err == nil || !strings.Contains(err.Error(), "tty") {
		t.Errorf("Parse(tty: \"no\") = %v, want an error naming tty", err)
	}
}
