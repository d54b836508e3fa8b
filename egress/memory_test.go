package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The memory test's attacker is this test binary run again with
// attackerEnv set to a mode, joined to the call's namespace: its
// connections cost the test process (which hosts the listeners) nothing
// but what the listeners hold for them.
const (
	attackerEnv   = "DSH_EGRESS_TEST_ATTACK"
	attackerNSEnv = "DSH_EGRESS_TEST_NS"
	// attackConns is how many connections each attack opens, below
	// maxConns so that every one of them is served.
	attackConns = 500
	// attackBytes is what each connection tries to send.
	attackBytes = 1 << 20
	// memoryBound is the most one call's listeners may grow the host
	// process by, whatever the call sends (issue 21).
	memoryBound = 64 << 20
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(attackerEnv); mode != "" {
		if err := attack(mode, os.Getenv(attackerNSEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "attacker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestHostMemoryBounded runs each attack on a call's listeners from a
// process inside the call's namespace, 500 connections at once, and
// checks that the test process, which hosts the listeners, grows by at
// most memoryBound (resident set, sampled every 10 ms, against a
// baseline taken after returning freed memory to the system), that the
// call still ends normally and that its record holds the refusals.
func TestHostMemoryBounded(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		mode   string
		reason string // of at least one record, "" for none expected
	}{
		{"header", "request header larger than"},                    // 1 MB in one header line
		{"headers", "request header larger than"},                   // 1 MB of short distinct header lines
		{"slowloris", "request header not received"},                // a header byte every second
		{"silent", "request header not received"},                   // connect, send nothing
		{"socks", "SOCKS5: request not received"},                   // a SOCKS5 greeting, then nothing
		{"dns", "connection limit: 64 connections to 127.0.0.1:53"}, // a 64 KiB DNS-over-TCP message, never finished
		{"tunnel", ""}, // CONNECT tunnels pushing 1 MB each, never reading
		{"body", ""},   // plain HTTP POST of 1 MB each, never reading
		{"bound", "TLS handshake with the call failed"}, // CONNECT to a credential's host, then half a TLS record
	} {
		t.Run(tc.mode, func(t *testing.T) {
			// The upstream lives in the attacker, which accepts on
			// this listener: its buffers are not the host's either.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lnFile, err := ln.(*net.TCPListener).File()
			ln.Close()
			if err != nil {
				t.Fatal(err)
			}
			defer lnFile.Close()
			// A header timeout of 10 s rather than 30 s, to keep the
			// slow-loris runs short.
			ph, _ := NewPlaceholder("b")
			c, err := Start(Options{Allow: []string{"echo.test:7", "bound.test"}, Network: testNetwork(ln.Addr().String()), headerTimeout: 10 * time.Second,
				Credentials: []Credential{{Name: "b", Host: "bound.test", Header: "Authorization", Value: "a-secret-value", Placeholder: ph}}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			runtime.GC()
			debug.FreeOSMemory()
			base := rss(t)
			baseHeap := heapBytes()

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = []string{attackerEnv + "=" + tc.mode, attackerNSEnv + "=" + c.NamespacePath()}
			cmd.ExtraFiles = []*os.File{lnFile}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			peak, peakHeap := base, baseHeap
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
		sample:
			for {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("attacker %s: %v\n%s", tc.mode, err, out.String())
					}
					break sample
				case <-ctx.Done():
					cmd.Process.Kill()
					<-done
					t.Fatalf("attacker %s did not finish within 2 minutes\n%s", tc.mode, out.String())
				case <-tick.C:
					peak, peakHeap = max(peak, rss(t)), max(peakHeap, heapBytes())
				}
			}
			recs := c.Close()
			var refused, allowed int
			for _, r := range recs {
				if r.Verdict == Denied && tc.reason != "" && strings.Contains(r.Reason, tc.reason) {
					refused++
				}
				if r.Verdict == Allowed {
					allowed++
				}
			}
			if (tc.mode == "tunnel" || tc.mode == "body") && allowed != attackConns {
				t.Errorf("%s: %d allowed connections recorded, want %d (every connection reached the upstream)", tc.mode, allowed, attackConns)
			}
			grew := peak - base
			t.Logf("%s: resident set %.1f MiB -> peak %.1f MiB (+%.1f MiB); Go heap objects +%.1f MiB at peak; %d refusals recorded; attacker: %s",
				tc.mode, mib(base), mib(peak), mib(grew), mib(peakHeap-baseHeap), refused, strings.TrimSpace(out.String()))
			if grew > memoryBound {
				t.Errorf("%s: the host process grew by %.1f MiB, want at most %.0f MiB", tc.mode, mib(grew), mib(memoryBound))
			}
			if tc.reason != "" && refused == 0 {
				t.Errorf("%s: no record of a refusal with %q among %d records", tc.mode, tc.reason, len(recs))
			}
			// The call's network still works for a new call: Start and
			// a tunnel through it (the call itself ended normally above).
			c2, err := Start(Options{Allow: []string{"echo.test:7"}, Network: testNetwork(newEchoUpstream(t).ln.Addr().String())})
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			conn, _, code := connect(t, c2, "echo.test:7")
			conn.Close()
			if code != 200 {
				t.Errorf("after the %s attack, CONNECT through a new call = %d, want 200", tc.mode, code)
			}
		})
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// rss is the resident set of the test process, from /proc/self/status.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// heapBytes is the Go heap's live and not yet collected objects.
func heapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// attack runs in the attacker process: it joins the namespace at ns,
// opens attackConns connections and sends what mode says on each, then
// waits until the listeners closed them (or, for the modes the
// listeners keep open, a few seconds) and prints what it saw.
func attack(mode, ns string) error {
	upstream, err := net.FileListener(os.NewFile(3, "upstream"))
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := upstream.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	addr := ProxyAddr
	switch mode {
	case "socks":
		addr = SOCKSAddr
	case "dns":
		addr = DNSAddr
	}
	conns := make([]net.Conn, 0, attackConns)
	err = joinNamespace(ns, func() error {
		for range attackConns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var (
		wg             sync.WaitGroup
		closed, status atomic.Int64
		tunnels        atomic.Int64
		statuses       sync.Map
	)
	junk := bytes.Repeat([]byte("a"), attackBytes)
	var many bytes.Buffer
	for i := 0; many.Len() < attackBytes; i++ {
		fmt.Fprintf(&many, "X-%07d: v\r\n", i)
	}
	hold := 3 * time.Second // for the modes whose connections stay open
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			readDone := make(chan struct{})
			go func() {
				defer close(readDone)
				if mode == "tunnel" || mode == "body" || mode == "bound" {
					return // never read here
				}
				br := bufio.NewReader(c)
				line, err := br.ReadString('\n')
				if strings.HasPrefix(line, "HTTP/1.1 ") {
					status.Add(1)
					code, _, _ := strings.Cut(strings.TrimPrefix(line, "HTTP/1.1 "), " ")
					n, _ := statuses.LoadOrStore(code, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				}
				if err == nil {
					_, err = io.Copy(io.Discard, br)
				}
				closed.Add(1)
			}()
			switch mode {
			case "header":
				fmt.Fprintf(c, "GET http://echo.test:7/ HTTP/1.1\r\nHost: echo.test:7\r\nX-Big: ")
				c.Write(junk)
				c.Write([]byte("\r\n\r\n"))
			case "headers":
				fmt.Fprintf(c, "GET http://echo.test:7/ HTTP/1.1\r\nHost: echo.test:7\r\n")
				c.Write(many.Bytes())
				c.Write([]byte("\r\n"))
			case "slowloris":
				fmt.Fprintf(c, "GET http://echo.test:7/ HTTP/1.1\r\n")
				for i := 0; ; i++ {
					select {
					case <-readDone:
						return
					case <-time.After(time.Second):
					}
					if _, err := fmt.Fprintf(c, "X-%d: v\r\n", i); err != nil {
						break
					}
				}
			case "silent":
			case "socks":
				c.Write([]byte{5, 1, 0, 5, 1}) // greeting, then half a request
			case "dns":
				var l [2]byte
				binary.BigEndian.PutUint16(l[:], 0xffff)
				c.Write(l[:])
				c.Write(junk[:0xffff-1])
			case "tunnel":
				// Once the tunnel is up, push 1 MB and never read the echo.
				fmt.Fprintf(c, "CONNECT echo.test:7 HTTP/1.1\r\nHost: echo.test:7\r\n\r\n")
				if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
					return
				}
				tunnels.Add(1)
				c.SetWriteDeadline(time.Now().Add(hold))
				c.Write(junk)
			case "bound":
				// The proxy terminates this tunnel: a TLS record header
				// announcing 16 KiB, 8 KiB of it, then nothing.
				fmt.Fprintf(c, "CONNECT bound.test:443 HTTP/1.1\r\nHost: bound.test:443\r\n\r\n")
				br := bufio.NewReader(c)
				if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
					return
				}
				tunnels.Add(1)
				c.Write(append([]byte{22, 3, 1, 0x40, 0}, junk[:8<<10]...))
				c.SetReadDeadline(time.Now().Add(time.Minute))
				if _, err := io.Copy(io.Discard, br); err == nil {
					closed.Add(1) // by the listener, at the handshake's deadline
				}
			case "body":
				fmt.Fprintf(c, "POST http://echo.test:7/ HTTP/1.1\r\nHost: echo.test:7\r\nContent-Length: %d\r\n\r\n", attackBytes)
				c.SetWriteDeadline(time.Now().Add(hold))
				c.Write(junk)
				// Until the proxy answers (the upstream is no HTTP server).
				c.SetReadDeadline(time.Now().Add(time.Minute))
				if line, _ := bufio.NewReader(c).ReadString('\n'); line != "" {
					status.Add(1)
				}
			default:
				panic("unknown attack " + mode)
			}
			select {
			case <-readDone:
			case <-time.After(hold + time.Minute):
			}
		}()
	}
	wg.Wait()
	var codes []string
	statuses.Range(func(k, v any) bool {
		codes = append(codes, fmt.Sprintf("%s×%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	fmt.Printf("%d connections, %d closed by the listener, status codes %v, %d tunnels up, %d HTTP answers", len(conns), closed.Load(), codes, tunnels.Load(), status.Load())
	if mode != "tunnel" && mode != "body" && closed.Load() != int64(len(conns)) {
		return fmt.Errorf("%d of %d connections were closed by the listener, want all", closed.Load(), len(conns))
	}
	return nil
}
