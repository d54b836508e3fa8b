package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestStringCase(t *testing.T) {
	secrets := []Secret{
		{Name: "TOKEN", Value: "s3cr3t-value"},
		{Name: "SHORT", Value: "abcde"},
		{Name: "LONG", Value: "s3cr3t-value-longer"},
		{Name: "AB", Value: "abcdef"},
		{Name: "bad name\"", Value: "quote-me"},
	}
	s := New(secrets, Options{})
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"nothing here", "nothing here"},
		{"x s3cr3t-value y", "x [REDACTED:TOKEN] y"},
		{"s3cr3t-values3cr3t-value", "[REDACTED:TOKEN][REDACTED:TOKEN]"},
		{"s3cr3t-value-longer!", "[REDACTED:LONG]!"},
		{"s3cr3t-value-longe", "[REDACTED:TOKEN]-longe"},
		{"abcde abcdef", "abcde [REDACTED:AB]"},
		{"quote-me", "[REDACTED:bad_name_]"},
		{"s3cr3t-valu", "s3cr3t-valu"},
	} {
		if got := s.String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := s.Skipped(); len(got) != 1 || got[0] != "SHORT" {
		t.Errorf("Skipped() = %q, want [SHORT]", got)
	}
	var nilSet *Set
	if got := nilSet.String("s3cr3t-value"); got != "s3cr3t-value" {
		t.Errorf("nil Set String = %q, want the input", got)
	}
}

func TestWriterSplitCase(t *testing.T) {
	s := New([]Secret{{Name: "S", Value: "0123456789"}, {Name: "L", Value: "0123456789abcdef"}}, Options{})
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"two writes", []string{"a 01234", "56789 b"}, "a [REDACTED:S] b"},
		{"byte by byte", strings.Split("x0123456789abcdefy", ""), "x[REDACTED:L]y"},
		{"three writes", []string{"012", "3456", "789"}, "[REDACTED:S]"},
		{"longer wins across writes", []string{"0123456789", "abcdef"}, "[REDACTED:L]"},
		{"shorter at end of stream", []string{"0123456789", "abc"}, "[REDACTED:S]abc"},
		{"prefix only", []string{"01234", "5678"}, "012345678"},
		{"false start", []string{"0120123456789"}, "012[REDACTED:S]"},
	} {
		var out bytes.Buffer
		w := s.Writer(&out)
		for _, p := range tc.writes {
			if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
				t.Fatalf("%s: Write(%q) = %d, %v", tc.name, p, n, err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatalf("%s: Close() = %v", tc.name, err)
		}
		if got := out.String(); got != tc.want {
			t.Errorf("%s: writes %q gave %q, want %q", tc.name, tc.writes, got, tc.want)
		}
	}
}

// TestWriterHoldsOnlyPrefixes checks that bytes that cannot begin a
// secret leave at once and that a possible secret's first bytes do not.
func TestWriterHoldsOnlyPrefixes(t *testing.T) {
	s := New([]Secret{{Name: "S", Value: "hunter2-secret"}}, Options{})
	var out bytes.Buffer
	w := s.Writer(&out)
	w.Write([]byte("ok\nhunter"))
	if got := out.String(); got != "ok\n" {
		t.Errorf("after a possible prefix, out = %q, want %q", got, "ok\n")
	}
	w.Write([]byte("!"))
	if got := out.String(); got != "ok\nhunter!" {
		t.Errorf("after the prefix broke off, out = %q, want %q", got, "ok\nhunter!")
	}
}

func TestBase64Forms(t *testing.T) {
	const v = "correct-horse-battery"
	s := New([]Secret{{Name: "PW", Value: v}}, Options{Base64: true})
	for _, prefix := range []string{"", "a", "ab", "abc"} {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
			e := enc.EncodeToString([]byte(prefix + v + "tail"))
			got := s.String(e)
			if !strings.Contains(got, "[REDACTED:PW]") {
				t.Errorf("String(base64(%q+v+tail) = %q) = %q, want a marker", prefix, e, got)
			}
		}
	}
	padded := base64.StdEncoding.EncodeToString([]byte(v))
	if got := s.String(padded + "\n"); got != "[REDACTED:PW]\n" {
		t.Errorf("String(%q) = %q, want the whole padded form redacted", padded, got)
	}
	if got := New([]Secret{{Name: "PW", Value: v}}, Options{}).String(padded); got != padded {
		t.Errorf("without Base64, String(%q) = %q, want it unchanged", padded, got)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("broken pipe")
}

func TestWriterError(t *testing.T) {
	f := &failWriter{}
	w := New([]Secret{{Name: "S", Value: "secret"}}, Options{}).Writer(f)
	if _, err := w.Write([]byte("hello")); err == nil {
		t.Fatal("Write to a failing writer = nil error, want it")
	}
	if _, err := w.Write([]byte("again")); err == nil || f.n != 1 {
		t.Errorf("second Write = %v after %d underlying writes, want the first error and no new write", err, f.n)
	}
}

// naive is the reference redactor: at each position the longest value
// (or JSON form of one) that starts there, else the byte. orig marks the
// output bytes copied from the input.
func naive(secrets []Secret, in []byte) (out []byte, orig []bool) {
	sorted := slices.Clone(secrets)
	slices.SortStableFunc(sorted, func(a, b Secret) int { return strings.Compare(a.Name, b.Name) })
	var vals []Secret // value → marker, first name wins
	seen := map[string]bool{}
	for _, s := range sorted {
		if len(s.Value) < MinLen {
			continue
		}
		for _, v := range append([]string{s.Value}, jsonForms(s.Value)...) {
			if len(v) >= MinLen && !seen[v] {
				seen[v] = true
				vals = append(vals, Secret{Name: Marker(s.Name), Value: v})
			}
		}
	}
	for i := 0; i < len(in); {
		best := -1
		for j, s := range vals {
			if bytes.HasPrefix(in[i:], []byte(s.Value)) && (best < 0 || len(s.Value) > len(vals[best].Value)) {
				best = j
			}
		}
		if best < 0 {
			out, orig = append(out, in[i]), append(orig, true)
			i++
			continue
		}
		m := vals[best].Name
		out = append(out, m...)
		orig = append(orig, make([]bool, len(m))...)
		i += len(vals[best].Value)
	}
	return out, orig
}

// checkStream redacts in as one string and as a stream cut at cuts, and
// compares both with the reference; no secret may survive in bytes
// copied from the input.
func checkStream(t *testing.T, secrets []Secret, in []byte, cuts []int) {
	t.Helper()
	s := New(secrets, Options{})
	want, orig := naive(secrets, in)
	if got := s.Bytes(in); !bytes.Equal(got, want) {
		t.Fatalf("Bytes(%q) with %q = %q, want %q", in, secrets, got, want)
	}
	var out bytes.Buffer
	w := s.Writer(&out)
	prev := 0
	for _, c := range cuts {
		c = min(max(c, prev), len(in))
		w.Write(in[prev:c])
		prev = c
	}
	w.Write(in[prev:])
	w.Close()
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("stream %q cut at %v with %q = %q, want %q", in, cuts, secrets, out.Bytes(), want)
	}
	for _, sec := range secrets {
		if len(sec.Value) < MinLen {
			continue
		}
		for i := 0; ; {
			j := bytes.Index(want[i:], []byte(sec.Value))
			if j < 0 {
				break
			}
			whole := true
			for _, o := range orig[i+j : i+j+len(sec.Value)] {
				whole = whole && o
			}
			if whole {
				t.Fatalf("secret %q survives in %q (input %q)", sec.Name, want, in)
			}
			i += j + 1
		}
	}
}

func TestStreamMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab01[]:")
	for range 2000 {
		var secrets []Secret
		for i := range 1 + r.IntN(3) {
			v := make([]byte, 1+r.IntN(10))
			for k := range v {
				v[k] = alphabet[r.IntN(len(alphabet))]
			}
			secrets = append(secrets, Secret{Name: string(rune('A' + i)), Value: string(v)})
		}
		in := make([]byte, r.IntN(40))
		for k := range in {
			in[k] = alphabet[r.IntN(len(alphabet))]
		}
		cuts := []int{r.IntN(41), r.IntN(41), r.IntN(41)}
		checkStream(t, secrets, in, cuts)
	}
}

// FuzzWriter checks a stream cut in three against the reference
// redactor. Seeds run in every `go test`; `go test -fuzz FuzzWriter
// ./redact/` explores further.
func FuzzWriter(f *testing.F) {
	f.Add("secret", "other", "", "a secret and another", 3, 9, 12)
	f.Add("0123456789", "012345", "6789ab", "x0123456789ab012345", 1, 2, 16)
	f.Add("aaaaaa", "aaaaaaa", "aa", "aaaaaaaaaaaaaaaaa", 4, 4, 7)
	f.Add("ab]:ab", "[REDACTED:A]", "REDACT", "[REDACTED:A]ab]:ab", 5, 11, 13)
	f.Fuzz(func(t *testing.T, s1, s2, s3, in string, c1, c2, c3 int) {
		if len(in) > 4096 {
			return
		}
		secrets := []Secret{{"A", s1}, {"B", s2}, {"C", s3}}
		cuts := []int{c1 & 0xfff, c2 & 0xfff, c3 & 0xfff}
		checkStream(t, secrets, []byte(in), cuts)
	})
}

// copySink copies every write into its buffer, as a capture does.
type copySink struct{ buf [64 << 10]byte }

func (c *copySink) Write(p []byte) (int, error) { copy(c.buf[:], p); return len(p), nil }

// benchInput is 1 MiB of text with a secret every 64 KiB.
func benchInput() ([]byte, []Secret) {
	secrets := []Secret{
		{Name: "GITHUB_TOKEN", Value: "ghp_0123456789abcdefghijABCDEFGHIJ012345"},
		{Name: "DB_PASSWORD", Value: "correct-horse-battery-staple"},
		{Name: "AWS_SECRET_ACCESS_KEY", Value: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"},
	}
	line := []byte("2026-12-01T12:00:00Z INFO building package github.com/example/project/internal/server ok\n")
	var in []byte
	for len(in) < 1<<20 {
		in = append(in, line...)
		if len(in)%(64<<10) < len(line) {
			in = append(in, secrets[len(in)%3].Value...)
		}
	}
	return in, secrets
}

// BenchmarkWriter reports the redacting Writer's throughput next to a
// plain copy of the same input in 32 KiB writes (the baseline);
// compare the two MB/s figures of one run.
func BenchmarkWriter(b *testing.B) {
	in, secrets := benchInput()
	write := func(_ *testing.B, w io.Writer) {
		for off := 0; off < len(in); off += 32 << 10 {
			w.Write(in[off:min(off+32<<10, len(in))])
		}
	}
	var sink copySink
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			write(b, &sink)
		}
	})
	for _, o := range []struct {
		name string
		opts Options
	}{{"redact", Options{}}, {"redact-base64", Options{Base64: true}}} {
		b.Run(o.name, func(b *testing.B) {
			s := New(secrets, o.opts)
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				w := s.Writer(&sink)
				write(b, w)
				w.Close()
			}
		})
	}
}

// TestJSONForms: a value with characters JSON escapes is redacted inside
// a JSON document too, with and without HTML escaping.
func TestJSONForms(t *testing.T) {
	const v = `p"ss\wo<r>d&1`
	s := New([]Secret{{Name: "PW", Value: v}}, Options{})
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if err := enc.Encode(map[string]string{"command": "echo " + v}); err != nil {
			t.Fatal(err)
		}
		if got := s.String(b.String()); got != "{\"command\":\"echo [REDACTED:PW]\"}\n" {
			t.Errorf("String(%s) = %s, want the escaped value redacted", b.String(), got)
		}
	}
}
