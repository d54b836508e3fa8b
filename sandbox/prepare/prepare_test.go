package prepare

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestPrepareInvalid(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(r *sandbox.Request)
		mention string
	}{
		{"empty command", func(r *sandbox.Request) { r.Command = "" }, "command"},
		{"blank command", func(r *sandbox.Request) { r.Command = " \t\n" }, "command"},
		{"NUL in command", func(r *sandbox.Request) { r.Command = "echo a\x00b" }, "command"},
		{"no policy", func(r *sandbox.Request) { r.Policy = sandbox.Policy{} }, "policy.backend"},
		{"negative timeout", func(r *sandbox.Request) { r.TimeoutMs = -1 }, "timeoutMs -1"},
		{"negative policy timeout", func(r *sandbox.Request) { r.Policy.Limits.TimeoutMs = -5 }, "policy.limits.timeoutMs"},
		{"negative policy max timeout", func(r *sandbox.Request) { r.Policy.Limits.MaxTimeoutMs = -5 }, "policy.limits.maxTimeoutMs"},
		{"negative stdoutMaxBytes", func(r *sandbox.Request) { r.StdoutMaxBytes = -1 }, "stdoutMaxBytes -1"},
		{"huge stdoutMaxBytes", func(r *sandbox.Request) { r.StdoutMaxBytes = MaxTailBytes + 1 }, "stdoutMaxBytes"},
		{"negative policy stdoutMaxBytes", func(r *sandbox.Request) { r.Policy.Limits.StdoutMaxBytes = -1 }, "policy.limits.stdoutMaxBytes"},
		{"negative spill cap", func(r *sandbox.Request) { r.Policy.Limits.SpillMaxBytes = -1 }, "policy.limits.spillMaxBytes"},
		{"relative workdir", func(r *sandbox.Request) { r.Workdir = "src" }, `workdir "src"`},
		{"dot workdir", func(r *sandbox.Request) { r.Workdir = "./x" }, `workdir "./x"`},
		{"NUL in workdir", func(r *sandbox.Request) { r.Workdir = "/a\x00b" }, "workdir"},
		{"relative session cwd", func(r *sandbox.Request) { r.Session.Cwd = "work" }, "session.cwd"},
		{"relative transcript dir", func(r *sandbox.Request) { r.Session.TranscriptDir = "../s" }, "session.transcriptDir"},
		{"NUL in session id", func(r *sandbox.Request) { r.Session.ID = "a\x00" }, "session.id"},
		{"terminal under tty: false", func(r *sandbox.Request) { r.Terminal = &sandbox.Terminal{}; r.Policy.DenyTTY = true }, "tty: false"},
		{"call id with slash", func(r *sandbox.Request) { r.CallID = "../../etc/x" }, "callId"},
		{"call id dot-dot", func(r *sandbox.Request) { r.CallID = ".." }, "callId"},
		{"call id leading dash", func(r *sandbox.Request) { r.CallID = "-rf" }, "callId"},
		{"call id too long", func(r *sandbox.Request) { r.CallID = strings.Repeat("a", 65) }, "callId"},
		{"NUL in env value", func(r *sandbox.Request) { r.Env = []string{"A=b\x00c"} }, `env[0]: value of "A"`},
		{"env entry without =", func(r *sandbox.Request) { r.Env = []string{"OK=1", "junk"} }, "env[1]"},
		{"env empty name", func(r *sandbox.Request) { r.Env = []string{"=x"} }, "env[0]"},
		{"policy envSet NUL", func(r *sandbox.Request) { r.Policy.EnvSet = map[string]string{"G": "a\x00"} }, `policy.envSet: value of "G"`},
		{"policy envSet bad name", func(r *sandbox.Request) { r.Policy.EnvSet = map[string]string{"A=B": "1"} }, "policy.envSet"},
		{"policy inherit bad name", func(r *sandbox.Request) { r.Policy.EnvInherit = []string{""} }, "env.inherit"},
		{"dshEnv outside DSH_", func(r *sandbox.Request) { r.DSHEnv = append(r.DSHEnv, "PATH=/evil") }, `dshEnv[3]: name "PATH"`},
		{"dshEnv lower case", func(r *sandbox.Request) { r.DSHEnv = []string{"dsh_home=/x"} }, `"dsh_home"`},
		{"dshEnv twice", func(r *sandbox.Request) { r.DSHEnv = []string{"DSH_HOME=/a", "DSH_HOME=/b"} }, `dshEnv[1]: "DSH_HOME" is set twice`},
		{"dshEnv NUL", func(r *sandbox.Request) { r.DSHEnv = []string{"DSH_HOME=/a\x00"} }, `"DSH_HOME"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := calls.Request()
			tt.mutate(req)
			c, err := Call(req, nil, nil, nil)
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Fatalf("Call(%s) = %+v, %v, want an error wrapping ErrInvalid", tt.name, c, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("Call(%s) error %q does not name %q", tt.name, err, tt.mention)
			}
		})
	}
	if _, err := Call(nil, nil, nil, nil); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Call(nil) error = %v, want ErrInvalid", err)
	}
}

func TestPrepareResolve(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(r *sandbox.Request)
		check  func(t *testing.T, c *sandbox.Call)
	}{
		{"defaults", func(r *sandbox.Request) {}, func(t *testing.T, c *sandbox.Call) {
			want := sandbox.Call{
				Timeout: sandbox.DefaultTimeout, Workdir: "/srv/project", TailBytes: sandbox.DefaultStdoutMaxBytes,
				SpillMax: sandbox.DefaultSpillMaxBytes, SpillDir: "/home/u/.dsh/sessions/--work-project--/0190a1b2-c3d4/spill",
				SpillInside: true, SpillTotal: sandbox.DefaultSpillTotalBytes, SpillRetention: sandbox.DefaultSpillRetention,
			}
			c.ID, c.Env = "", nil
			if !reflect.DeepEqual(*c, want) {
				t.Errorf("Call(defaults) = %+v, want %+v", *c, want)
			}
		}},
		{"request timeout", func(r *sandbox.Request) { r.TimeoutMs = 1500 }, func(t *testing.T, c *sandbox.Call) {
			if c.Timeout != 1500*time.Millisecond {
				t.Errorf("Timeout = %v, want 1.5s", c.Timeout)
			}
		}},
		{"timeout clamped to default max", func(r *sandbox.Request) { r.TimeoutMs = 1 << 62 }, func(t *testing.T, c *sandbox.Call) {
			if c.Timeout != sandbox.DefaultMaxTimeout {
				t.Errorf("Timeout = %v, want %v", c.Timeout, sandbox.DefaultMaxTimeout)
			}
		}},
		{"policy timeout and max", func(r *sandbox.Request) {
			r.Policy.Limits.TimeoutMs, r.Policy.Limits.MaxTimeoutMs = 5000, 4000
		}, func(t *testing.T, c *sandbox.Call) {
			if c.Timeout != 4*time.Second {
				t.Errorf("Timeout = %v, want 4s (policy default clamped to policy max)", c.Timeout)
			}
		}},
		{"policy tail and spill", func(r *sandbox.Request) {
			r.Policy.Limits.StdoutMaxBytes, r.Policy.Limits.SpillMaxBytes = 100, 1000
		}, func(t *testing.T, c *sandbox.Call) {
			if c.TailBytes != 100 || c.SpillMax != 1000 {
				t.Errorf("TailBytes, SpillMax = %d, %d, want 100, 1000", c.TailBytes, c.SpillMax)
			}
		}},
		{"request tail wins", func(r *sandbox.Request) {
			r.StdoutMaxBytes, r.Policy.Limits.StdoutMaxBytes = 10, 100
		}, func(t *testing.T, c *sandbox.Call) {
			if c.TailBytes != 10 {
				t.Errorf("TailBytes = %d, want 10", c.TailBytes)
			}
		}},
		{"explicit workdir cleaned", func(r *sandbox.Request) { r.Workdir = "/srv//x/../y/" }, func(t *testing.T, c *sandbox.Call) {
			if c.Workdir != "/srv/y" {
				t.Errorf("Workdir = %q, want /srv/y", c.Workdir)
			}
		}},
		{"read-only workspace is the default workdir", func(r *sandbox.Request) { r.Policy.Workspace = "ro" }, func(t *testing.T, c *sandbox.Call) {
			if c.Workdir != "/srv/project" {
				t.Errorf("Workdir = %q, want /srv/project", c.Workdir)
			}
		}},
		{"unmounted workspace means /tmp", func(r *sandbox.Request) { r.Policy.Workspace = "none" }, func(t *testing.T, c *sandbox.Call) {
			if c.Workdir != "/tmp" {
				t.Errorf("Workdir = %q, want /tmp", c.Workdir)
			}
		}},
		{"no session", func(r *sandbox.Request) { r.Session = sandbox.Session{} }, func(t *testing.T, c *sandbox.Call) {
			if c.Workdir != "/tmp" || c.SpillDir != "" || c.SpillInside {
				t.Errorf("Workdir, SpillDir, SpillInside = %q, %q, %v, want /tmp, \"\", false", c.Workdir, c.SpillDir, c.SpillInside)
			}
		}},
		{"transcript not mounted", func(r *sandbox.Request) { r.Policy.Transcript = "none" }, func(t *testing.T, c *sandbox.Call) {
			if c.SpillDir == "" || c.SpillInside {
				t.Errorf("SpillDir, SpillInside = %q, %v, want a dir outside the sandbox", c.SpillDir, c.SpillInside)
			}
		}},
		{"given call id", func(r *sandbox.Request) { r.CallID = "call-42.retry_1" }, func(t *testing.T, c *sandbox.Call) {
			if c.ID != "call-42.retry_1" {
				t.Errorf("ID = %q, want call-42.retry_1", c.ID)
			}
		}},
		{"env layers", func(r *sandbox.Request) {
			r.Env = []string{"DSH_SESSION_ID=forged", "B=request"}
			r.Policy.EnvSet = map[string]string{"B": "policy", "A": "policy", "DSH_HOME": "/forged"}
			r.Policy.EnvInherit = []string{"LANG", "OPENAI_API_KEY", "DSH_STALE"}
		}, func(t *testing.T, c *sandbox.Call) {
			want := []string{
				"A=policy", "B=request", "DSH_HOME=/home/u/.dsh", "DSH_SESSION_ID=0190a1b2-c3d4", "DSH_SHELL=1",
				"GIT_PAGER=cat", "HOME=/tmp", "LANG=C.UTF-8", "NO_COLOR=1", "PAGER=cat", "PATH=/bin", "TERM=dumb",
			}
			if !slices.Equal(c.Env, want) {
				t.Errorf("Env = %q, want %q", c.Env, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := calls.Request()
			tt.mutate(req)
			c, err := Call(req, []string{"PATH=/bin", "HOME=/tmp"},
				fixtures.MapEnv("LANG=C.UTF-8", "OPENAI_API_KEY=sk", "DSH_STALE=1"), nil)
			if err != nil {
				t.Fatalf("Call(%s) error: %v", tt.name, err)
			}
			if !sandbox.ValidCallID(c.ID) {
				t.Errorf("Call(%s).ID = %q, not a valid call id", tt.name, c.ID)
			}
			tt.check(t, c)
		})
	}
}

func TestPrepareRandomIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		c, err := Call(calls.Request(), nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(c.ID, "call-") || len(c.ID) != len("call-")+24 || seen[c.ID] {
			t.Fatalf("Call().ID = %q: want a fresh call-<24 hex>", c.ID)
		}
		seen[c.ID] = true
	}
}

// BenchmarkPrepare is the per-call preparation of env, snapshot and mount
// inputs (target ≤ 1 ms).
func BenchmarkPrepare(b *testing.B) {
	req := calls.Request()
	req.Env = []string{"GOFLAGS=-mod=mod", "CI=1"}
	req.Policy.EnvInherit = []string{"LANG", "TZ", "OPENAI_API_KEY"}
	req.Policy.EnvSet = map[string]string{"A": "1", "B": "2"}
	env := fixtures.BenchEnv()
	req.DSHEnv = env.Snapshot
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Call(req, env.Base, env.Getenv, nil); err != nil {
			b.Fatal(err)
		}
	}
}
