package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// pattern returns n bytes that differ at every position modulo 251, so a
// misplaced byte shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// writeChunks writes data to w in chunks of the given sizes, cycling.
func writeChunks(t testing.TB, w io.Writer, data []byte, sizes []int) {
	t.Helper()
	for i := 0; len(data) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(data))
		if got, err := w.Write(data[:n]); got != n || err != nil {
			t.Fatalf("Write(%d bytes) = %d, %v, want %d, nil", n, got, err, n)
		}
		data = data[n:]
	}
}

func TestCaptureTruncated(t *testing.T) {
	const tail = 100
	tests := []struct {
		name   string
		total  int
		chunks []int
	}{
		{"empty", 0, []int{1}},
		{"below tail", 99, []int{7}},
		{"exactly tail", 100, []int{100}},
		{"tail plus one", 101, []int{101}},
		{"one byte over in two writes", 101, []int{100, 1}},
		{"byte by byte", 1000, []int{1}},
		{"one big write", 10_000, []int{10_000}},
		{"chunks crossing the ring edge", 5003, []int{33, 67, 99, 100, 101, 250}},
		{"first write larger than tail", 450, []int{150, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			spill := filepath.Join(dir, "spill", "call-1.stdout")
			data := pattern(tt.total)
			c := New(Options{TailBytes: tail, SpillPath: spill, SpillInside: true})
			writeChunks(t, c, data, tt.chunks)
			s, err := c.Stream()
			if err != nil {
				t.Fatalf("Stream() error: %v", err)
			}
			keep := min(tt.total, tail)
			if s.Text != string(data[tt.total-keep:]) {
				t.Errorf("Stream().Text = %d bytes %q…, want the last %d bytes", len(s.Text), s.Text[:min(len(s.Text), 8)], keep)
			}
			if want := int64(tt.total - keep); s.DroppedBytes != want {
				t.Errorf("Stream().DroppedBytes = %d, want %d", s.DroppedBytes, want)
			}
			if s.Truncated != (tt.total > tail) {
				t.Errorf("Stream().Truncated = %v, want %v", s.Truncated, tt.total > tail)
			}
			if tt.total <= tail {
				if s.SpillPath != "" || s.SpillInside {
					t.Errorf("Stream() = %+v, want no spill path", s)
				}
				if _, err := os.Stat(filepath.Dir(spill)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("spill dir exists (%v) although the output fit the tail", err)
				}
				return
			}
			if s.SpillPath != spill || !s.SpillInside {
				t.Errorf("Stream().SpillPath, SpillInside = %q, %v, want %q, true", s.SpillPath, s.SpillInside, spill)
			}
			got, err := os.ReadFile(spill)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Errorf("spill file holds %d bytes, want the whole output of %d bytes", len(got), len(data))
			}
			assertMode(t, spill, 0o600)
			assertMode(t, filepath.Dir(spill), 0o700|fs.ModeDir)
		})
	}
}

func assertMode(t *testing.T, path string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != want {
		t.Errorf("mode of %s = %v, want %v", filepath.Base(path), fi.Mode(), want)
	}
}

func TestCaptureRandomChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		tail := 1 + r.IntN(300)
		spillMax := int64(1 + r.IntN(2000))
		total := r.IntN(3000)
		data := make([]byte, total)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		spill := filepath.Join(t.TempDir(), "s")
		c := New(Options{TailBytes: tail, SpillPath: spill, SpillMax: spillMax})
		for rest := data; len(rest) > 0; {
			n := min(1+r.IntN(2*tail), len(rest))
			c.Write(rest[:n])
			rest = rest[n:]
		}
		s, err := c.Stream()
		if err != nil {
			t.Fatal(err)
		}
		keep := min(total, tail)
		if s.Text != string(data[total-keep:]) || s.DroppedBytes != int64(total-keep) {
			t.Fatalf("case %d (tail %d, total %d): Text %d bytes, DroppedBytes %d, want the last %d bytes and %d",
				i, tail, total, len(s.Text), s.DroppedBytes, keep, total-keep)
		}
		if total > tail {
			got, err := os.ReadFile(spill)
			if err != nil {
				t.Fatal(err)
			}
			if want := data[:min(int64(total), spillMax)]; !bytes.Equal(got, want) {
				t.Fatalf("case %d (tail %d, total %d, cap %d): spill file %d bytes, want the first %d", i, tail, total, spillMax, len(got), len(want))
			}
		}
	}
}

func TestCaptureSpillCap(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "out")
	data := pattern(10_000)
	c := New(Options{TailBytes: 100, SpillPath: spill, SpillMax: 1234})
	writeChunks(t, c, data, []int{999})
	s, err := c.Stream()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(spill)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[:1234]) {
		t.Errorf("spill file = %d bytes, want the first 1234 bytes", len(got))
	}
	if s.SpillPath != spill || s.DroppedBytes != 9900 {
		t.Errorf("Stream() = SpillPath %q, DroppedBytes %d, want %q, 9900", s.SpillPath, s.DroppedBytes, spill)
	}
}

func TestCaptureSpillCapBelowTail(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "out")
	data := pattern(500)
	c := New(Options{TailBytes: 100, SpillPath: spill, SpillMax: 10})
	writeChunks(t, c, data, []int{60})
	if _, err := c.Stream(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(spill)
	if !bytes.Equal(got, data[:10]) {
		t.Errorf("spill file = %q, want the first 10 bytes", got)
	}
}

func TestCaptureNoSpillPath(t *testing.T) {
	c := New(Options{TailBytes: 10})
	c.Write(pattern(25))
	s, err := c.Stream()
	if err != nil {
		t.Fatal(err)
	}
	if !s.Truncated || s.DroppedBytes != 15 || s.SpillPath != "" {
		t.Errorf("Stream() = %+v, want truncated, 15 dropped, no spill path", s)
	}
}

func TestCaptureDefaults(t *testing.T) {
	c := New(Options{})
	c.Write(pattern(sandbox.DefaultStdoutMaxBytes + 1))
	s, _ := c.Stream()
	if len(s.Text) != sandbox.DefaultStdoutMaxBytes || s.DroppedBytes != 1 {
		t.Errorf("New(zero) kept %d bytes, dropped %d, want %d and 1", len(s.Text), s.DroppedBytes, sandbox.DefaultStdoutMaxBytes)
	}
}

func TestCaptureSpillFailures(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the spill path
		check func(t *testing.T, path string)
	}{
		{"file exists", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "out")
			os.WriteFile(p, []byte("precious"), 0o600)
			return p
		}, func(t *testing.T, p string) {
			if got, _ := os.ReadFile(p); string(got) != "precious" {
				t.Errorf("existing file = %q, want it untouched", got)
			}
		}},
		{"symlink planted", func(t *testing.T, dir string) string {
			target := filepath.Join(dir, "target")
			os.WriteFile(target, []byte("precious"), 0o600)
			p := filepath.Join(dir, "out")
			os.Symlink(target, p)
			return p
		}, func(t *testing.T, p string) {
			if got, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "target")); string(got) != "precious" {
				t.Errorf("symlink target = %q, want it untouched", got)
			}
		}},
		{"parent is a file", func(t *testing.T, dir string) string {
			f := filepath.Join(dir, "file")
			os.WriteFile(f, nil, 0o600)
			return filepath.Join(f, "out")
		}, func(t *testing.T, p string) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.setup(t, t.TempDir())
			c := New(Options{TailBytes: 4, SpillPath: p, SpillInside: true})
			if n, err := c.Write([]byte("0123456789")); n != 10 || err != nil {
				t.Fatalf("Write() = %d, %v, want 10, nil: spill errors must not fail the producer", n, err)
			}
			s, err := c.Stream()
			if !errors.Is(err, sandbox.ErrInternal) {
				t.Errorf("Stream() error = %v, want ErrInternal", err)
			}
			if s.Text != "6789" || s.DroppedBytes != 6 || !s.Truncated || s.SpillPath != "" || s.SpillInside {
				t.Errorf("Stream() = %+v, want the tail without a spill path", s)
			}
			tt.check(t, p)
		})
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	w.n++
	return 0, errors.New("broken pipe")
}

func TestCaptureLive(t *testing.T) {
	var live bytes.Buffer
	data := pattern(1000)
	c := New(Options{TailBytes: 10, Live: &live})
	writeChunks(t, c, data, []int{7})
	if !bytes.Equal(live.Bytes(), data) {
		t.Errorf("live writer got %d bytes, want all %d", live.Len(), len(data))
	}

	fw := &failWriter{}
	c = New(Options{TailBytes: 10, Live: fw})
	c.Write([]byte("abc"))
	c.Write([]byte("def"))
	s, err := c.Stream()
	if err != nil || s.Text != "abcdef" {
		t.Errorf("Stream() = %q, %v with a failing live writer, want \"abcdef\", nil", s.Text, err)
	}
	if fw.n != 1 {
		t.Errorf("failing live writer called %d times, want 1 (stop after the first error)", fw.n)
	}
}

func TestCaptureAfterStream(t *testing.T) {
	c := New(Options{TailBytes: 10})
	c.Write([]byte("abc"))
	first, _ := c.Stream()
	if n, err := c.Write([]byte("late")); n != 4 || err != nil {
		t.Errorf("Write after Stream = %d, %v, want 4, nil", n, err)
	}
	second, _ := c.Stream()
	if first != second || second.Text != "abc" {
		t.Errorf("Stream() after a late write = %+v, want %+v", second, first)
	}
}

func TestCaptureBinary(t *testing.T) {
	var all []byte
	for i := range 256 {
		all = append(all, byte(i))
	}
	c := New(Options{TailBytes: 300})
	c.Write(all)
	s, _ := c.Stream()
	if s.Text != string(all) {
		t.Errorf("Stream().Text = %q, want all 256 byte values", s.Text)
	}
}

func TestCaptureConcurrentWrites(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "out")
	c := New(Options{TailBytes: 64, SpillPath: spill})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Write([]byte{byte('a' + g)})
			}
		})
	}
	wg.Wait()
	s, err := c.Stream()
	if err != nil {
		t.Fatal(err)
	}
	if s.DroppedBytes != 8000-64 || len(s.Text) != 64 {
		t.Errorf("Stream() kept %d, dropped %d, want 64 and %d", len(s.Text), s.DroppedBytes, 8000-64)
	}
	got, _ := os.ReadFile(spill)
	counts := map[byte]int{}
	for _, b := range got {
		counts[b]++
	}
	for g := range 8 {
		if counts[byte('a'+g)] != 1000 {
			t.Errorf("spill file has %d bytes of writer %d, want 1000", counts[byte('a'+g)], g)
		}
	}
}

// TestCaptureWriteDoesNotAllocate checks that memory stays bounded: once
// the ring is full, writing more output allocates nothing.
func TestCaptureWriteDoesNotAllocate(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "out")
	c := New(Options{TailBytes: 4096, SpillPath: spill, SpillMax: 1 << 20})
	chunk := pattern(32 << 10)
	c.Write(chunk) // fill the ring and open the spill file
	if n := testing.AllocsPerRun(200, func() { c.Write(chunk) }); n != 0 {
		t.Errorf("Write allocates %v times per call in steady state, want 0", n)
	}
	if cap(c.tail.buf) > 4096 {
		t.Errorf("tail buffer capacity = %d, want ≤ 4096", cap(c.tail.buf))
	}
	c.Stream()
}

// BenchmarkCapture200MB writes 200 MB through a capture with the default
// tail and spill cap; B/op is the memory the capture needs, independent of
// the output size.
func BenchmarkCapture200MB(b *testing.B) {
	chunk := pattern(32 << 10)
	const total = 200 << 20
	for _, spill := range []bool{false, true} {
		b.Run("spill="+strconv.FormatBool(spill), func(b *testing.B) {
			dir := b.TempDir()
			b.ReportAllocs()
			b.SetBytes(total)
			i := 0
			for b.Loop() {
				o := Options{}
				if spill {
					i++
					o.SpillPath = filepath.Join(dir, strconv.Itoa(i))
				}
				c := New(o)
				for n := 0; n < total; n += len(chunk) {
					c.Write(chunk)
				}
				if _, err := c.Stream(); err != nil {
					b.Fatal(err)
				}
				if spill {
					os.Remove(o.SpillPath)
				}
			}
		})
	}
}

// spillFile writes a spill file of size bytes modified at mtime.
func spillFile(t *testing.T, dir, name string, size int, mtime time.Time) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestPruneSpill(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	dir := filepath.Join(t.TempDir(), "spill")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	spillFile(t, dir, "old.stdout", 10, now.Add(-25*time.Hour)) // past retention
	spillFile(t, dir, "a.stdout", 400, now.Add(-3*time.Hour))   // oldest kept candidate
	spillFile(t, dir, "b.stdout", 300, now.Add(-2*time.Hour))
	spillFile(t, dir, "c.stdout", 200, now.Add(-1*time.Hour))
	outside := filepath.Join(t.TempDir(), "outside")
	spillFile(t, filepath.Dir(outside), "outside", 5000, now.Add(-48*time.Hour))
	if err := os.Symlink(outside, filepath.Join(dir, "link.stdout")); err != nil {
		t.Fatal(err)
	}

	// total 1000, reserve 300: keep at most 700 → a (oldest) goes; b and
	// c (500) stay; 500 bytes may still be written.
	left, err := PruneSpill(dir, 1000, 300, 24*time.Hour, now)
	if err != nil || left != 500 {
		t.Fatalf("PruneSpill = %d, %v, want 500, nil", left, err)
	}
	for name, want := range map[string]bool{"old.stdout": false, "a.stdout": false, "b.stdout": true, "c.stdout": true, "link.stdout": true} {
		if _, err := os.Lstat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("after PruneSpill %s exists = %v, want %v", name, err == nil, want)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("PruneSpill touched the target of a link: %v", err)
	}

	// Under the cap nothing more goes.
	if left, err := PruneSpill(dir, 1000, 0, 24*time.Hour, now); err != nil || left != 500 {
		t.Errorf("PruneSpill under the cap = %d, %v, want 500, nil", left, err)
	}
	// A spill directory behind a link is refused: no budget.
	link := filepath.Join(t.TempDir(), "spill-link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if left, err := PruneSpill(link, 1000, 0, time.Hour, now); !errors.Is(err, sandbox.ErrInvalid) || left != 0 {
		t.Errorf("PruneSpill(link) = %d, %v, want 0, ErrInvalid", left, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.stdout")); err != nil {
		t.Errorf("PruneSpill through a link removed files: %v", err)
	}
}

func TestCaptureBudget(t *testing.T) {
	dir := t.TempDir()
	budget := NewSpillBudget(150)
	out := New(Options{TailBytes: 10, SpillPath: filepath.Join(dir, "c.stdout"), Budget: budget})
	errc := New(Options{TailBytes: 10, SpillPath: filepath.Join(dir, "c.stderr"), Budget: budget})
	data := pattern(100)
	out.Write(data)
	errc.Write(data)
	errc.Write(data) // over budget: the spill stops
	so, err := out.Stream()
	if err != nil {
		t.Fatal(err)
	}
	se, err := errc.Stream()
	if err != nil {
		t.Fatalf("a capture past its budget failed: %v", err)
	}
	if !so.Truncated || so.DroppedBytes != 90 || se.DroppedBytes != 190 || so.Text != string(data[90:]) {
		t.Errorf("streams = %+v, %+v; want truncated with 90 and 190 dropped bytes", so, se)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "c.stdout"))
	b, _ := os.ReadFile(filepath.Join(dir, "c.stderr"))
	if len(a)+len(b) != 150 || !bytes.Equal(a, data) || !bytes.Equal(b, data[:50]) {
		t.Errorf("spill files hold %d and %d bytes, want 100 and 50 (the budget), from byte 0", len(a), len(b))
	}
	if budget.Left() != 0 {
		t.Errorf("budget left %d, want 0", budget.Left())
	}

	// An empty budget creates no spill file and reports no path.
	empty := New(Options{TailBytes: 10, SpillPath: filepath.Join(dir, "d.stdout"), Budget: NewSpillBudget(0)})
	empty.Write(data)
	s, err := empty.Stream()
	if err != nil || !s.Truncated || s.DroppedBytes != 90 || s.SpillPath != "" {
		t.Errorf("empty budget: %+v, %v; want truncated, no spill path, no error", s, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "d.stdout")); err == nil {
		t.Errorf("an empty budget created a spill file")
	}
}

func TestCallCapturesBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s1", "spill")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	spillFile(t, dir, "old.stdout", 10, now.Add(-2*time.Hour))
	spillFile(t, dir, "prev.stdout", 600, now.Add(-time.Minute))
	c := &sandbox.Call{ID: "call-3", TailBytes: 10, SpillMax: 400, SpillDir: dir, SpillTotal: 1000, SpillRetention: time.Hour}
	out, _ := ForCall(c, "/nonexistent-state", nil, nil)
	if _, err := os.Lstat(filepath.Join(dir, "old.stdout")); err == nil {
		t.Errorf("Captures kept a spill file past its retention")
	}
	// reserve min(1000/2, 400) = 400: 600 ≤ 600 stays; budget 400.
	if _, err := os.Stat(filepath.Join(dir, "prev.stdout")); err != nil {
		t.Errorf("Captures removed a file although the directory was under the cap: %v", err)
	}
	out.Write(pattern(1000))
	s, err := out.Stream()
	if err != nil || s.SpillPath == "" || s.DroppedBytes != 990 {
		t.Fatalf("stream = %+v, %v", s, err)
	}
	if total := dirBytes(dir); total > 1000 {
		t.Errorf("spill directory holds %d bytes, over the cap of 1000", total)
	}
}

// TestCallCapturesWithoutSessionBounded: a call without a session spills
// to <stateDir>/spill, which gets the same cap and retention as a
// session's spill directory: four calls that each outgrow the cap leave
// at most the cap, and a file past its retention goes.
func TestCallCapturesWithoutSessionBounded(t *testing.T) {
	state := t.TempDir()
	dir := filepath.Join(state, "spill")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	spillFile(t, dir, "old.stdout", 10, time.Now().Add(-2*time.Hour))
	for i := range 4 {
		c := &sandbox.Call{ID: fmt.Sprintf("call-%d", i), TailBytes: 10, SpillMax: 400, SpillTotal: 1000, SpillRetention: time.Hour}
		out, errs := ForCall(c, state, nil, nil)
		out.Write(pattern(1000))
		errs.Write(pattern(1000))
		if s, err := out.Stream(); err != nil || s.SpillPath != filepath.Join(dir, c.ID+".stdout") {
			t.Fatalf("call %d: stream = %+v, %v; want a spill file in %s", i, s, err, dir)
		}
		errs.Stream()
		if total := dirBytes(dir); total > 1000 {
			t.Errorf("after call %d the spill directory of calls without a session holds %d bytes, over the cap of 1000", i, total)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "old.stdout")); err == nil {
		t.Errorf("a spill file past its retention was kept")
	}
}

// dirBytes is the size of the files in dir together.
func dirBytes(dir string) int64 {
	var total int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			total += fi.Size()
		}
	}
	return total
}

// TestCaptureRedacts: the tail, the spill file, the live writer and the
// counts see the redacted stream, also when a secret is split across
// writes and when it straddles the point where the spill starts.
func TestCaptureRedacts(t *testing.T) {
	const secret = "s3cr3t-0123456789"
	set := redact.New([]redact.Secret{{Name: "TOKEN", Value: secret}}, redact.Options{})
	spill := filepath.Join(t.TempDir(), "spill", "call.stdout")
	var live strings.Builder
	c := New(Options{TailBytes: 40, SpillPath: spill, Live: &live, Redact: set})
	in := strings.Repeat("x", 30) + secret + " middle " + secret[:4]
	writeChunks(t, c, []byte(in), []int{7})
	if strings.Contains(live.String(), secret[:4]) {
		t.Errorf("live output %q shows the first bytes of a secret whose end is unknown", live.String())
	}
	c.Write([]byte(secret[4:] + " end"))
	st, err := c.Stream()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("x", 30) + "[REDACTED:TOKEN] middle [REDACTED:TOKEN] end"
	if live.String() != want {
		t.Errorf("live = %q, want %q", live.String(), want)
	}
	if st.Text != want[len(want)-40:] || st.DroppedBytes != int64(len(want)-40) {
		t.Errorf("Stream = %q dropping %d, want %q dropping %d", st.Text, st.DroppedBytes, want[len(want)-40:], len(want)-40)
	}
	data, err := os.ReadFile(spill)
	if err != nil || string(data) != want {
		t.Errorf("spill file = %q, %v, want %q", data, err, want)
	}

	// A stream that ends on a possible secret's first bytes keeps them.
	c = New(Options{Redact: set})
	c.Write([]byte("end " + secret[:6]))
	if st, _ := c.Stream(); st.Text != "end "+secret[:6] {
		t.Errorf("Stream of a stream ending on a prefix = %q, want it whole", st.Text)
	}
}
