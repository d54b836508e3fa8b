package sandboxtest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"strings"
	"sync"
)

// watchWriter is a live output writer (Request.Stdout) that runs fn once,
// from the executor's goroutine, as soon as the output contains trigger.
// It keeps only enough output to find the trigger across writes. It is
// safe for concurrent use.
type watchWriter struct {
	trigger string
	fn      func()

	mu   sync.Mutex
	tail []byte
	once sync.Once
	seen bool
}

func newWatchWriter(trigger string, fn func()) *watchWriter {
	return &watchWriter{trigger: trigger, fn: fn}
}

// Write records p and fires the trigger; it never fails.
func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	fire := false
	if !w.seen {
		w.tail = append(w.tail, p...)
		if bytes.Contains(w.tail, []byte(w.trigger)) {
			w.seen, fire, w.tail = true, true, nil
		} else if keep := len(w.trigger); len(w.tail) > keep {
			w.tail = append(w.tail[:0], w.tail[len(w.tail)-keep:]...)
		}
	}
	w.mu.Unlock()
	if fire {
		w.once.Do(w.fn)
	}
	return len(p), nil
}

// fired reports whether the trigger was seen.
func (w *watchWriter) fired() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// newMarker returns a random nine-digit number to put in the command
// lines of processes a case starts, e.g. as `sleep <marker>` (about 30
// years), so that a scan of the host's /proc can find survivors.
func newMarker() string {
	n, err := rand.Int(rand.Reader, big.NewInt(900_000_000))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return strconv.FormatInt(n.Int64()+100_000_000, 10)
}

// hostProcsWith lists the host processes, other than this one, whose
// command line contains marker, as "pid N: cmdline". Processes inside a
// gVisor sandbox are not host processes and never show up.
func hostProcsWith(marker string) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []string{fmt.Sprintf("read /proc: %v", err)}
	}
	self := strconv.Itoa(os.Getpid())
	var found []string
	for _, e := range entries {
		name := e.Name()
		if _, err := strconv.Atoi(name); err != nil || name == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		found = append(found, fmt.Sprintf("pid %s: %s", name, strings.ReplaceAll(strings.TrimSuffix(string(b), "\x00"), "\x00", " ")))
	}
	return found
}
