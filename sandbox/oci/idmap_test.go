package oci

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// BenchmarkUserNamespace times whole calls of `true` in one workspace
// per variant, interleaved in one run: user host-root (no user
// namespace), a uid-1000 workspace (a user namespace, uid 1000 mapped
// 1:1) and a root-owned workspace (a user namespace plus id-mapped
// staging mounts of the workspace and session directory; under runsc
// the read-only root too). Every variant stages each bind. Run it with
// -benchtime=30x or more; it reports the median of each variant.
func BenchmarkUserNamespace(b *testing.B) {
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			e := newTestExecutor(b, rt)
			type variant struct {
				name string
				req  *sandbox.Request
				ds   []time.Duration
			}
			mk := func(name string, user sandbox.User, owner int) *variant {
				ws := filepath.Join(b.TempDir(), "ws")
				if err := os.Mkdir(ws, 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.Chown(ws, owner, owner); err != nil {
					b.Fatal(err)
				}
				p := testPolicy(b, rt)
				p.User = user
				tr := filepath.Join(b.TempDir(), "sessions", "s")
				return &variant{name: name, req: &sandbox.Request{Command: "true", Policy: p,
					Session: sandbox.Session{ID: "s", Cwd: ws, TranscriptDir: tr}}}
			}
			vs := []*variant{mk("host-root", policy.UserHostRoot, 0), mk("userns", "auto", 1000), mk("userns-idmap", "auto", 0)}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, v := range vs {
					t := time.Now()
					res, err := e.Run(context.Background(), v.req)
					v.ds = append(v.ds, time.Since(t))
					if err != nil || sandbox.ExitCode(res, nil) != 0 {
						b.Fatalf("%s: Run(true) = %+v, %v", v.name, res, err)
					}
				}
			}
			b.StopTimer()
			for _, v := range vs {
				ds := v.ds
				slices.Sort(ds)
				b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), v.name+"-median-ms")
			}
		})
	}
}
