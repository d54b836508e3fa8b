package jsonl

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/session"
)

func TestEncodeSegmentCases(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"session-1234", "session-1234"},
		{"abc_XYZ.09-", "abc_XYZ.09-"},
		{".", "~002E"},
		{"..", "~002E~002E"},
		{"...", "..."},
		{".hidden", ".hidden"},
		{"a.b", "a.b"},
		{"~", "~007E"},
		{"a/b", "a~002Fb"},
		{"../etc/passwd", "..~002Fetc~002Fpasswd"},
		{`a\b`, "a~005Cb"},
		{"a:b", "a~003Ab"},
		{"a b", "a~0020b"},
		{"\x00", "~0000"},
		{"<&>", "~003C~0026~003E"},
		{"é", "~00E9"},
		{"开发", "~5F00~53D1"},
		{"\U0001F600", "~D83D~DE00"},
		{"\uFFFD", "~FFFD"},
		{"{{sessionId}}", "~007B~007BsessionId~007D~007D"},
	}
	for _, tt := range tests {
		got, err := EncodeSegment(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("EncodeSegment(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
		back, err := DecodeSegment(got)
		if err != nil || back != tt.in {
			t.Errorf("DecodeSegment(%q) = %q, %v, want %q", got, back, err, tt.in)
		}
	}
}

func TestEncodeSegmentErrors(t *testing.T) {
	for _, in := range []string{"", "\xff", "ok\xc3"} {
		if got, err := EncodeSegment(in); err == nil {
			t.Errorf("EncodeSegment(%q) = %q, nil, want an error", in, got)
		}
	}
}

func TestDecodeSegmentMalformed(t *testing.T) {
	tests := []struct {
		in   string
		why  string
		hint string // substring the error must contain
	}{
		{"", "empty", "empty"},
		{".", "a literal dot names the current directory", "not an encoded segment"},
		{"..", "a literal dot-dot names the parent directory", "not an encoded segment"},
		{"a/b", "separator must be escaped", "must be escaped"},
		{"a b", "space must be escaped", "must be escaped"},
		{"é", "non-ASCII must be escaped", "must be escaped"},
		{"~", "short escape", "malformed escape"},
		{"~00", "short escape", "malformed escape"},
		{"~002e", "lowercase hex", "malformed escape"},
		{"~00G1", "not hex", "malformed escape"},
		{"~0041", "escaped safe unit", "stays literal"},
		{"a~002E", "escaped dot inside a segment", "stays literal"},
		{"~002E~002E~002E", "escaped dots beyond the whole-segment forms", "stays literal"},
		{"~D83D", "lone high surrogate", "unpaired surrogate"},
		{"~DE00", "lone low surrogate", "unpaired surrogate"},
		{"~D83Da", "high surrogate then literal", "unpaired surrogate"},
		{"~D83D~0020", "high surrogate then non-surrogate", "unpaired surrogate"},
		{"~D83D~D83D", "two high surrogates", "unpaired surrogate"},
	}
	for _, tt := range tests {
		got, err := DecodeSegment(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.hint) {
			t.Errorf("DecodeSegment(%q) = %q, %v, want an error containing %q (%s)", tt.in, got, err, tt.hint, tt.why)
		}
	}
}

func TestProjectKeyCases(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct {
		cwd  string
		want string
	}{
		// The examples of DESIGN §3.2.
		{"/srv/dev/deepseek-harness", "--srv-dev-deepseek-harness--"},
		{`C:\work\agent`, "--C-work-agent--"},
		{"/", "--root--"},
		{"/开发/~agent", "--~5F00~53D1-~007Eagent--"},
		// More.
		{"", "--root--"},
		{"///", "--root--"},
		{"/a//b\\:c/", "--a-b-c---"},
		{"/-x", "--x--"},
		{"--x", "--x--"},
		{"/a b", "--a~0020b--"},
		{"/\U0001F600", "--~D83D~DE00--"},
		{"/\xff", "--~FFFD--"},
		{`\\server\share`, "--server-share--"},
		{"/" + long, "--" + long[:251] + "--"},
		// Truncation may cut an escape, as in dsh.
		{"/" + strings.Repeat("a", 248) + " b", "--" + strings.Repeat("a", 248) + "~00--"},
	}
	for _, tt := range tests {
		if got := ProjectKey(tt.cwd); got != tt.want {
			t.Errorf("ProjectKey(%q) = %q, want %q", tt.cwd, got, tt.want)
		}
	}
}

func TestPathCases(t *testing.T) {
	root := filepath.FromSlash("/var/lib/dsh/sessions")
	tests := []struct {
		name string
		h    session.Header
		c    Compression
		want string
	}{
		{"cwd plain", session.Header{ID: "session-1", Cwd: "/srv/app"}, CompressionNone, "/var/lib/dsh/sessions/--srv-app--/session-1/session.jsonl"},
		{"cwd zstd", session.Header{ID: "session-1", Cwd: "/srv/app"}, CompressionZstd, "/var/lib/dsh/sessions/--srv-app--/session-1/session.jsonl.zstd"},
		{"zero compression is plain", session.Header{ID: "session-1", Cwd: "/srv/app"}, "", "/var/lib/dsh/sessions/--srv-app--/session-1/session.jsonl"},
		{"no cwd", session.Header{ID: "s"}, CompressionNone, "/var/lib/dsh/sessions/_no-cwd/s/session.jsonl"},
		{"hostile id", session.Header{ID: "../../etc", Cwd: "/w"}, CompressionNone, "/var/lib/dsh/sessions/--w--/..~002F..~002Fetc/session.jsonl"},
		{"dot id", session.Header{ID: "..", Cwd: "/w"}, CompressionNone, "/var/lib/dsh/sessions/--w--/~002E~002E/session.jsonl"},
		{"empty id", session.Header{Cwd: "/w"}, CompressionNone, ""},
		{"non-UTF-8 id", session.Header{ID: "\xff", Cwd: "/w"}, CompressionNone, ""},
	}
	for _, tt := range tests {
		want := filepath.FromSlash(tt.want)
		if got := Path(root, tt.h, tt.c); got != want {
			t.Errorf("%s: Path(%q, %+v, %q) = %q, want %q", tt.name, root, tt.h, tt.c, got, want)
		}
	}
	// A root given with a trailing separator or as "/" joins cleanly.
	h := session.Header{ID: "s", Cwd: "/w"}
	for root, want := range map[string]string{
		"/srv/sessions/": "/srv/sessions/--w--/s/session.jsonl",
		"/":              "/--w--/s/session.jsonl",
	} {
		if got := Path(filepath.FromSlash(root), h, CompressionNone); got != filepath.FromSlash(want) {
			t.Errorf("Path(%q, %+v, none) = %q, want %q", root, h, got, want)
		}
	}
}

func TestParseCompressionCases(t *testing.T) {
	tests := []struct {
		in      string
		want    Compression
		wantErr bool
	}{
		{"none", CompressionNone, false},
		{"zstd", CompressionZstd, false},
		{"", "", true},
		{"gzip", "", true},
		{"ZSTD", "", true},
	}
	for _, tt := range tests {
		got, err := ParseCompression(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseCompression(%q) = %q, %v, want %q (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), `"`+tt.in+`"`) {
			t.Errorf("ParseCompression(%q) error %q does not name the value", tt.in, err)
		}
	}
}
