package sandboxtest

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// outputCases check output capture: the kept tail, exact dropped counts,
// spill files, binary data, live writers and bounded memory.
func outputCases() []testCase {
	return []testCase{
		{name: "output-tail-truncation", run: testOutputTailTruncation},
		{name: "output-stderr-spill", run: testOutputStderrSpill},
		{name: "output-spill-cap", run: testOutputSpillCap},
		{name: "output-spill-visible-later", run: testOutputSpillVisibleLater},
		{name: "output-not-truncated", run: testOutputNotTruncated},
		{name: "output-binary", run: testOutputBinary},
		{name: "output-live-writers", run: testOutputLiveWriters},
		{name: "output-200mb-bounded-memory", run: testOutput200MBBoundedMemory},
	}
}

// seqOutput is the output of `seq 1 n`.
func seqOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// spillFile is where DESIGN §3.7 puts a call's spill file for stream
// ("stdout" or "stderr").
func spillFile(fx *fixture, callID, stream string) string {
	return filepath.Join(fx.TranscriptDir, "spill", callID+"."+stream)
}

// checkTruncated checks a stream that dropped its head: the kept tail,
// the exact dropped count, and a 0600 spill file at its documented path
// holding the output from byte 0 up to spillMax.
func checkTruncated(t *testing.T, fx *fixture, req *sandbox.Request, name string, st sandbox.Stream, full string, tail int, spillMax int64) {
	t.Helper()
	if want := full[len(full)-tail:]; st.Text != want {
		t.Errorf("%s.Text = %q, want the last %d bytes %q", name, short(st.Text), tail, short(want))
	}
	if !st.Truncated {
		t.Errorf("%s.Truncated = false, want true", name)
	}
	if want := int64(len(full) - tail); st.DroppedBytes != want {
		t.Errorf("%s.DroppedBytes = %d, want %d", name, st.DroppedBytes, want)
	}
	if want := spillFile(fx, req.CallID, name); st.SpillPath != want {
		t.Errorf("%s.SpillPath = %q, want %q", name, st.SpillPath, want)
	}
	if want := req.Policy.Transcript.Mounted(); st.SpillInside != want {
		t.Errorf("%s.SpillInside = %v, want %v (transcript %q)", name, st.SpillInside, want, req.Policy.Transcript)
	}
	if st.SpillPath == "" {
		return
	}
	fi, err := os.Stat(st.SpillPath)
	if err != nil {
		t.Fatalf("%s spill file: %v", name, err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s spill file mode = %v, want 0600", name, fi.Mode().Perm())
	}
	got, err := os.ReadFile(st.SpillPath)
	if err != nil {
		t.Fatalf("%s spill file: %v", name, err)
	}
	if want := full[:min(int64(len(full)), spillMax)]; string(got) != want {
		t.Errorf("%s spill file holds %d bytes %q, want %d bytes %q", name, len(got), short(string(got)), len(want), short(want))
	}
}

// checkWhole checks a stream that kept everything.
func checkWhole(t *testing.T, name string, st sandbox.Stream, want string) {
	t.Helper()
	if st.Text != want || st.Truncated || st.DroppedBytes != 0 || st.SpillPath != "" {
		t.Errorf("%s = {Text: %q, Truncated: %v, DroppedBytes: %d, SpillPath: %q}, want all of %q kept and no spill file",
			name, short(st.Text), st.Truncated, st.DroppedBytes, st.SpillPath, short(want))
	}
}

// truncatingRequest is a call with a 100-byte tail and a known call id.
func (s *suite) truncatingRequest(fx *fixture, command string) *sandbox.Request {
	req := s.request(fx, command)
	req.StdoutMaxBytes = 100
	req.CallID = "sandboxtest-" + randomHex(6)
	return req
}

// testOutputTailTruncation: stdout beyond StdoutMaxBytes keeps its tail,
// counts the dropped bytes exactly and spills the whole output.
func testOutputTailTruncation(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.truncatingRequest(fx, "seq 1 1000")
	res := s.runOK(t, req)
	checkTruncated(t, fx, req, "stdout", res.Stdout, seqOutput(1000), 100, sandbox.DefaultSpillMaxBytes)
	checkWhole(t, "stderr", res.Stderr, "")
}

// testOutputStderrSpill: stderr is bounded and spilled the same way,
// independently of stdout.
func testOutputStderrSpill(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.truncatingRequest(fx, "echo out; seq 1 1000 >&2")
	res := s.runOK(t, req)
	checkWhole(t, "stdout", res.Stdout, "out\n")
	checkTruncated(t, fx, req, "stderr", res.Stderr, seqOutput(1000), 100, sandbox.DefaultSpillMaxBytes)
	if _, err := os.Stat(spillFile(fx, req.CallID, "stdout")); err == nil {
		t.Errorf("stdout spill file exists although stdout was not truncated")
	}
}

// testOutputSpillCap: the spill file stops at Limits.SpillMaxBytes while
// DroppedBytes still counts everything.
func testOutputSpillCap(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.truncatingRequest(fx, "seq 1 5000")
	req.Policy.Limits.SpillMaxBytes = 1000
	res := s.runOK(t, req)
	checkTruncated(t, fx, req, "stdout", res.Stdout, seqOutput(5000), 100, 1000)
}

// testOutputSpillVisibleLater: a later call of the session can read the
// spill file at the path the result gave, and cannot change it.
func testOutputSpillVisibleLater(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.truncatingRequest(fx, "seq 1 1000")
	req.Policy.Transcript = "ro"
	res := s.runOK(t, req)
	path := res.Stdout.SpillPath
	if path == "" || !res.Stdout.SpillInside {
		t.Fatalf("stdout = %+v, want a spill file visible inside later calls", res.Stdout)
	}
	later := s.request(fx, "cat "+shellQuote(path))
	later.Policy.Transcript = "ro"
	res2 := s.runOK(t, later)
	if want := seqOutput(1000); res2.Stdout.Text != want {
		t.Errorf("cat %s in a later call = %q, want the whole output %q", path, short(res2.Stdout.Text), short(want))
	}
	if !s.cfg.Isolated {
		return
	}
	tamper := s.request(fx, "echo tampered >> "+shellQuote(path)+" 2>/dev/null && echo WROTE; rm -f "+shellQuote(path)+" 2>/dev/null; echo done")
	tamper.Policy.Transcript = "ro"
	res3 := s.runOK(t, tamper)
	if strings.Contains(res3.Stdout.Text, "WROTE") {
		t.Errorf("a later call appended to the spill file %s; want it read-only", path)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != seqOutput(1000) {
		t.Errorf("spill file after a later call tried to change it: %d bytes, err %v; want it unchanged", len(got), err)
	}
}

// testOutputNotTruncated: output within the bound is kept whole and no
// spill file is made.
func testOutputNotTruncated(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.truncatingRequest(fx, "printf '%0100d' 0; printf '%099d\\n' 0 >&2")
	res := s.runOK(t, req)
	checkWhole(t, "stdout", res.Stdout, strings.Repeat("0", 100))
	checkWhole(t, "stderr", res.Stderr, strings.Repeat("0", 99)+"\n")
	for _, stream := range []string{"stdout", "stderr"} {
		if _, err := os.Stat(spillFile(fx, req.CallID, stream)); err == nil {
			t.Errorf("%s spill file exists for output within the bound", stream)
		}
	}
}

// printfAllBytes is a printf command writing every byte value once.
func printfAllBytes() string {
	var b strings.Builder
	b.WriteString("printf '")
	for i := range 256 {
		fmt.Fprintf(&b, "\\%03o", i)
	}
	b.WriteString("'")
	return b.String()
}

// testOutputBinary: all 256 byte values pass through both streams
// unchanged.
func testOutputBinary(t *testing.T, s *suite) {
	fx := newFixture(t)
	cmd := printfAllBytes()
	req := s.request(fx, cmd+"; "+cmd+" >&2")
	res := s.runOK(t, req)
	want := string(allBytes())
	if res.Stdout.Text != want {
		t.Errorf("stdout = %q, want every byte value 0–255 in order", res.Stdout.Text)
	}
	if res.Stderr.Text != want {
		t.Errorf("stderr = %q, want every byte value 0–255 in order", res.Stderr.Text)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// testOutputLiveWriters: Request.Stdout and Stderr receive the whole
// output live, also when the result keeps only the tail.
func testOutputLiveWriters(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.truncatingRequest(fx, "seq 1 20000; seq 1 300 >&2")
	var out, errw lockedBuffer
	req.Stdout, req.Stderr = &out, &errw
	res := s.runOK(t, req)
	if want := seqOutput(20000); out.String() != want {
		t.Errorf("live stdout got %d bytes, want all %d", len(out.String()), len(want))
	}
	if want := seqOutput(300); errw.String() != want {
		t.Errorf("live stderr got %d bytes, want all %d", len(errw.String()), len(want))
	}
	checkTruncated(t, fx, req, "stdout", res.Stdout, seqOutput(20000), 100, sandbox.DefaultSpillMaxBytes)
}

// memoryWatch is a live writer that counts bytes and samples the heap of
// this process every sampleEvery bytes, recording the peak HeapInuse.
type memoryWatch struct {
	mu    sync.Mutex
	n     int64
	next  int64
	peak  uint64
	first []byte
}

const sampleEvery = 8 << 20

func (m *memoryWatch) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.first) < 64 {
		m.first = append(m.first, p[:min(len(p), 64-len(m.first))]...)
	}
	m.n += int64(len(p))
	if m.n >= m.next {
		m.next = m.n + sampleEvery
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		m.peak = max(m.peak, ms.HeapInuse)
	}
	return len(p), nil
}

// testOutput200MBBoundedMemory: 200 MiB of output pass through with the
// tail, the exact dropped count and the spill cap right, while this
// process's heap grows by less than 64 MB.
func testOutput200MBBoundedMemory(t *testing.T, s *suite) {
	const (
		line  = "abcdefghijklmno\n" // 16 bytes
		total = 200 << 20
		tail  = 64000 // a multiple of len(line)
	)
	fx := newFixture(t)
	req := s.request(fx, fmt.Sprintf("yes abcdefghijklmno | head -c %d", total))
	req.StdoutMaxBytes = tail
	req.CallID = "sandboxtest-" + randomHex(6)
	w := &memoryWatch{}
	req.Stdout = w

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	res := s.runOK(t, req)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	peak := max(w.peak, after.HeapInuse)
	growth := int64(peak) - int64(before.HeapInuse)
	t.Logf("HeapInuse before %d MB, peak %d MB, growth %d MB", before.HeapInuse>>20, peak>>20, growth>>20)
	if growth >= 64<<20 {
		t.Errorf("HeapInuse grew by %d MB while 200 MiB of output passed, want < 64 MB", growth>>20)
	}
	if w.n != total {
		t.Errorf("live stdout got %d bytes, want %d", w.n, total)
	}
	if !strings.HasPrefix(line+line+line+line, string(w.first)) || len(w.first) == 0 {
		t.Errorf("live stdout began %q, want %q…", w.first, line)
	}
	st := res.Stdout
	if st.Text != strings.Repeat(line, tail/len(line)) || !st.Truncated || st.DroppedBytes != total-tail {
		t.Errorf("stdout = {Text: %d bytes %q, Truncated: %v, DroppedBytes: %d}, want the last %d bytes, truncated, %d dropped",
			len(st.Text), short(st.Text), st.Truncated, st.DroppedBytes, tail, total-tail)
	}
	spillMax := cmp.Or(req.Policy.Limits.SpillMaxBytes, sandbox.DefaultSpillMaxBytes)
	f, err := os.Open(st.SpillPath)
	if err != nil {
		t.Fatalf("spill file: %v", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if want := min(int64(total), spillMax); fi.Size() != want {
		t.Errorf("spill file size = %d, want %d", fi.Size(), want)
	}
	head := make([]byte, 4096)
	if _, err := io.ReadFull(f, head); err != nil || string(head) != strings.Repeat(line, len(head)/len(line)) {
		t.Errorf("spill file head = %q (err %v), want the output from byte 0", short(string(head)), err)
	}
}
