package detect

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
)

// Made-up secrets of the shapes gitleaks's default rules know.
const (
	githubToken = "ghp_4vQ7xLm2Rt9ZkP0aBc3DeF6gHj8KnW1sYu5E"
	awsKey      = "AKIAZ7QW4RT2YU6IO3PL"
)

// gitleaks is the detector of the tests, one for all as in the command.
var gitleaks = &Gitleaks{}

// detectorIf returns gitleaks when on, else none.
func detectorIf(on bool) redact.Detector {
	if on {
		return gitleaks
	}
	return nil
}

// TestWriterDetects writes output holding a GitHub token and an AWS key
// in small pieces through a Writer with the detector on and off.
func TestWriterDetects(t *testing.T) {
	text := "token=" + githubToken + "\nnothing here\naws_access_key_id = " + awsKey + "\nend"
	for _, tc := range []struct {
		detect bool
		want   string
	}{
		{true, "token=[REDACTED:github-pat]\nnothing here\naws_access_key_id = [REDACTED:aws-access-token]\nend"},
		{false, text},
	} {
		var out bytes.Buffer
		w := redact.New(nil, redact.Options{Detector: detectorIf(tc.detect)}).Writer(&out)
		for i := 0; i < len(text); i += 7 {
			if _, err := w.Write([]byte(text[i:min(i+7, len(text))])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if out.String() != tc.want {
			t.Errorf("detect %v: Writer wrote %q, want %q", tc.detect, out.String(), tc.want)
		}
	}
}

// TestStringDetectsAfterValues: known values are replaced first, under
// their names, and the detector sees what is left.
func TestStringDetectsAfterValues(t *testing.T) {
	s := redact.New([]redact.Secret{{Name: "MY_TOKEN", Value: githubToken}}, redact.Options{Detector: gitleaks})
	got := s.String("a " + githubToken + " b " + awsKey)
	if want := "a [REDACTED:MY_TOKEN] b [REDACTED:aws-access-token]"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

// TestLongLineBounded: a line longer than MaxLine is passed on before its
// newline comes.
func TestLongLineBounded(t *testing.T) {
	var out bytes.Buffer
	w := redact.New(nil, redact.Options{Detector: gitleaks}).Writer(&out)
	if _, err := w.Write([]byte(strings.Repeat("x", redact.MaxLine+10))); err != nil {
		t.Fatal(err)
	}
	if out.Len() < redact.MaxLine {
		t.Errorf("a Writer holds %d bytes of a line without newline back, want at most %d", redact.MaxLine+10-out.Len(), redact.MaxLine)
	}
}

// BenchmarkWriter measures the throughput of redaction of typical
// build output with and without the detector.
func BenchmarkWriter(b *testing.B) {
	line := []byte("go: downloading github.com/example/module v1.2.3 (sum h1:abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG=)\n")
	chunk := bytes.Repeat(line, 32<<10/len(line))
	for _, detect := range []bool{false, true} {
		name := "values"
		if detect {
			name = "values+detector"
		}
		b.Run(name, func(b *testing.B) {
			s := redact.New([]redact.Secret{{Name: "T", Value: "s3cr3t-value-xyz"}}, redact.Options{Detector: detectorIf(detect)})
			w := s.Writer(io.Discard)
			b.SetBytes(int64(len(chunk)))
			for range b.N {
				if _, err := w.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFindConcurrent runs the detector from several goroutines at once,
// as the calls of a service do (run it with -race).
func TestFindConcurrent(t *testing.T) {
	g := &Gitleaks{}
	text := []byte("key " + awsKey + "\ntoken " + githubToken + "\n")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if n := len(g.Find(text)); n != 2 {
					t.Errorf("Find = %d findings, want 2", n)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestGitleaksAllowStillRedacts: a "gitleaks:allow" comment on the line
// does not keep a secret in the output.
func TestGitleaksAllowStillRedacts(t *testing.T) {
	s := redact.New(nil, redact.Options{Detector: gitleaks})
	got := s.String("token=" + githubToken + " # gitleaks:allow")
	if want := "token=[REDACTED:github-pat] # gitleaks:allow"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
