package sandbox

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func testPolicy() Policy {
	return Policy{
		Name:       "workspace-write",
		Backend:    "oci",
		Runtime:    "runc",
		Image:      "host",
		User:       "auto",
		Network:    "none",
		Workspace:  "rw",
		Transcript: "ro",
	}
}

func testRequest() *Request {
	return &Request{
		Command: "echo hi",
		Session: Session{
			ID:            "0190a1b2-c3d4",
			Cwd:           "/srv/project",
			TranscriptDir: "/home/u/.dsh/sessions/--work-project--/0190a1b2-c3d4",
		},
		DSHEnv: []string{"DSH_HOME=/home/u/.dsh", "DSH_SESSION_ID=0190a1b2-c3d4", "DSH_SHELL=1"},
		Policy: testPolicy(),
	}
}

func TestPrepareInvalid(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(r *Request)
		mention string
	}{
		{"empty command", func(r *Request) { r.Command = "" }, "command"},
		{"blank command", func(r *Request) { r.Command = " \t\n" }, "command"},
		{"NUL in command", func(r *Request) { r.Command = "echo a\x00b" }, "command"},
		{"no policy", func(r *Request) { r.Policy = Policy{} }, "policy.backend"},
		{"negative timeout", func(r *Request) { r.TimeoutMs = -1 }, "timeoutMs -1"},
		{"negative policy timeout", func(r *Request) { r.Policy.Limits.TimeoutMs = -5 }, "policy.limits.timeoutMs"},
		{"negative policy max timeout", func(r *Request) { r.Policy.Limits.MaxTimeoutMs = -5 }, "policy.limits.maxTimeoutMs"},
		{"negative stdoutMaxBytes", func(r *Request) { r.StdoutMaxBytes = -1 }, "stdoutMaxBytes -1"},
		{"huge stdoutMaxBytes", func(r *Request) { r.StdoutMaxBytes = MaxTailBytes + 1 }, "stdoutMaxBytes"},
		{"negative policy stdoutMaxBytes", func(r *Request) { r.Policy.Limits.StdoutMaxBytes = -1 }, "policy.limits.stdoutMaxBytes"},
		{"negative spill cap", func(r *Request) { r.Policy.Limits.SpillMaxBytes = -1 }, "policy.limits.spillMaxBytes"},
		{"relative workdir", func(r *Request) { r.Workdir = "src" }, `workdir "src"`},
		{"dot workdir", func(r *Request) { r.Workdir = "./x" }, `workdir "./x"`},
		{"NUL in workdir", func(r *Request) { r.Workdir = "/a\x00b" }, "workdir"},
		{"relative session cwd", func(r *Request) { r.Session.Cwd = "work" }, "session.cwd"},
		{"relative transcript dir", func(r *Request) { r.Session.TranscriptDir = "../s" }, "session.transcriptDir"},
		{"NUL in session id", func(r *Request) { r.Session.ID = "a\x00" }, "session.id"},
		{"terminal under tty: false", func(r *Request) { r.Terminal = &Terminal{}; r.Policy.DenyTTY = true }, "tty: false"},
		{"call id with slash", func(r *Request) { r.CallID = "../../etc/x" }, "callId"},
		{"call id dot-dot", func(r *Request) { r.CallID = ".." }, "callId"},
		{"call id leading dash", func(r *Request) { r.CallID = "-rf" }, "callId"},
		{"call id too long", func(r *Request) { r.CallID = strings.Repeat("a", 65) }, "callId"},
		{"NUL in env value", func(r *Request) { r.Env = []string{"A=b\x00c"} }, `env[0]: value of "A"`},
		{"env entry without =", func(r *Request) { r.Env = []string{"OK=1", "junk"} }, "env[1]"},
		{"env empty name", func(r *Request) { r.Env = []string{"=x"} }, "env[0]"},
		{"policy envSet NUL", func(r *Request) { r.Policy.EnvSet = map[string]string{"G": "a\x00"} }, `policy.envSet: value of "G"`},
		{"policy envSet bad name", func(r *Request) { r.Policy.EnvSet = map[string]string{"A=B": "1"} }, "policy.envSet"},
		{"policy inherit bad name", func(r *Request) { r.Policy.EnvInherit = []string{""} }, "env.inherit"},
		{"dshEnv outside DSH_", func(r *Request) { r.DSHEnv = append(r.DSHEnv, "PATH=/evil") }, `dshEnv[3]: name "PATH"`},
		{"dshEnv lower case", func(r *Request) { r.DSHEnv = []string{"dsh_home=/x"} }, `"dsh_home"`},
		{"dshEnv twice", func(r *Request) { r.DSHEnv = []string{"DSH_HOME=/a", "DSH_HOME=/b"} }, `dshEnv[1]: "DSH_HOME" is set twice`},
		{"dshEnv NUL", func(r *Request) { r.DSHEnv = []string{"DSH_HOME=/a\x00"} }, `"DSH_HOME"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := testRequest()
			tt.mutate(req)
			c, err := Prepare(req, nil, nil)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Prepare(%s) = %+v, %v, want an error wrapping ErrInvalid", tt.name, c, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("Prepare(%s) error %q does not name %q", tt.name, err, tt.mention)
			}
		})
	}
	if _, err := Prepare(nil, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Prepare(nil) error = %v, want ErrInvalid", err)
	}
}

func TestPrepareResolve(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(r *Request)
		check  func(t *testing.T, c *Call)
	}{
		{"defaults", func(r *Request) {}, func(t *testing.T, c *Call) {
			want := Call{
				Timeout: DefaultTimeout, Workdir: "/srv/project", TailBytes: DefaultStdoutMaxBytes,
				SpillMax: DefaultSpillMaxBytes, SpillDir: "/home/u/.dsh/sessions/--work-project--/0190a1b2-c3d4/spill",
				SpillInside: true, SpillTotal: DefaultSpillTotalBytes, SpillRetention: DefaultSpillRetention,
			}
			c.ID, c.Env = "", nil
			if !reflect.DeepEqual(*c, want) {
				t.Errorf("Prepare(defaults) = %+v, want %+v", *c, want)
			}
		}},
		{"request timeout", func(r *Request) { r.TimeoutMs = 1500 }, func(t *testing.T, c *Call) {
			if c.Timeout != 1500*time.Millisecond {
				t.Errorf("Timeout = %v, want 1.5s", c.Timeout)
			}
		}},
		{"timeout clamped to default max", func(r *Request) { r.TimeoutMs = 1 << 62 }, func(t *testing.T, c *Call) {
			if c.Timeout != DefaultMaxTimeout {
				t.Errorf("Timeout = %v, want %v", c.Timeout, DefaultMaxTimeout)
			}
		}},
		{"policy timeout and max", func(r *Request) {
			r.Policy.Limits.TimeoutMs, r.Policy.Limits.MaxTimeoutMs = 5000, 4000
		}, func(t *testing.T, c *Call) {
			if c.Timeout != 4*time.Second {
				t.Errorf("Timeout = %v, want 4s (policy default clamped to policy max)", c.Timeout)
			}
		}},
		{"policy tail and spill", func(r *Request) {
			r.Policy.Limits.StdoutMaxBytes, r.Policy.Limits.SpillMaxBytes = 100, 1000
		}, func(t *testing.T, c *Call) {
			if c.TailBytes != 100 || c.SpillMax != 1000 {
				t.Errorf("TailBytes, SpillMax = %d, %d, want 100, 1000", c.TailBytes, c.SpillMax)
			}
		}},
		{"request tail wins", func(r *Request) {
			r.StdoutMaxBytes, r.Policy.Limits.StdoutMaxBytes = 10, 100
		}, func(t *testing.T, c *Call) {
			if c.TailBytes != 10 {
				t.Errorf("TailBytes = %d, want 10", c.TailBytes)
			}
		}},
		{"explicit workdir cleaned", func(r *Request) { r.Workdir = "/srv//x/../y/" }, func(t *testing.T, c *Call) {
			if c.Workdir != "/srv/y" {
				t.Errorf("Workdir = %q, want /srv/y", c.Workdir)
			}
		}},
		{"read-only workspace is the default workdir", func(r *Request) { r.Policy.Workspace = "ro" }, func(t *testing.T, c *Call) {
			if c.Workdir != "/srv/project" {
				t.Errorf("Workdir = %q, want /srv/project", c.Workdir)
			}
		}},
		{"unmounted workspace means /tmp", func(r *Request) { r.Policy.Workspace = "none" }, func(t *testing.T, c *Call) {
			if c.Workdir != "/tmp" {
				t.Errorf("Workdir = %q, want /tmp", c.Workdir)
			}
		}},
		{"no session", func(r *Request) { r.Session = Session{} }, func(t *testing.T, c *Call) {
			if c.Workdir != "/tmp" || c.SpillDir != "" || c.SpillInside {
				t.Errorf("Workdir, SpillDir, SpillInside = %q, %q, %v, want /tmp, \"\", false", c.Workdir, c.SpillDir, c.SpillInside)
			}
		}},
		{"transcript not mounted", func(r *Request) { r.Policy.Transcript = "none" }, func(t *testing.T, c *Call) {
			if c.SpillDir == "" || c.SpillInside {
				t.Errorf("SpillDir, SpillInside = %q, %v, want a dir outside the sandbox", c.SpillDir, c.SpillInside)
			}
		}},
		{"given call id", func(r *Request) { r.CallID = "call-42.retry_1" }, func(t *testing.T, c *Call) {
			if c.ID != "call-42.retry_1" {
				t.Errorf("ID = %q, want call-42.retry_1", c.ID)
			}
		}},
		{"env layers", func(r *Request) {
			r.Env = []string{"DSH_SESSION_ID=forged", "B=request"}
			r.Policy.EnvSet = map[string]string{"B": "policy", "A": "policy", "DSH_HOME": "/forged"}
			r.Policy.EnvInherit = []string{"LANG", "OPENAI_API_KEY", "DSH_STALE"}
		}, func(t *testing.T, c *Call) {
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
			req := testRequest()
			tt.mutate(req)
			c, err := Prepare(req, []string{"PATH=/bin", "HOME=/tmp"},
				mapEnv("LANG=C.UTF-8", "OPENAI_API_KEY=sk", "DSH_STALE=1"))
			if err != nil {
				t.Fatalf("Prepare(%s) error: %v", tt.name, err)
			}
			if !ValidCallID(c.ID) {
				t.Errorf("Prepare(%s).ID = %q, not a valid call id", tt.name, c.ID)
			}
			tt.check(t, c)
		})
	}
}

func TestPrepareRandomIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		c, err := Prepare(testRequest(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(c.ID, "call-") || len(c.ID) != len("call-")+24 || seen[c.ID] {
			t.Fatalf("Prepare().ID = %q: want a fresh call-<24 hex>", c.ID)
		}
		seen[c.ID] = true
	}
}

func TestValidCallID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"call-0a1b", true},
		{"A", true},
		{"9_x.y-z", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{".", false},
		{"..", false},
		{".hidden", false},
		{"-flag", false},
		{"_x", false},
		{"a/b", false},
		{"a b", false},
		{"a\x00", false},
		{"é", false},
	}
	for _, tt := range tests {
		if got := ValidCallID(tt.id); got != tt.want {
			t.Errorf("ValidCallID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

// BenchmarkPrepare is the per-call preparation of env, snapshot and mount
// inputs (target ≤ 1 ms).
func BenchmarkPrepare(b *testing.B) {
	req := testRequest()
	req.Env = []string{"GOFLAGS=-mod=mod", "CI=1"}
	req.Policy.EnvInherit = []string{"LANG", "TZ", "OPENAI_API_KEY"}
	req.Policy.EnvSet = map[string]string{"A": "1", "B": "2"}
	env := benchEnvInput()
	req.DSHEnv = env.Snapshot
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Prepare(req, env.Base, env.Getenv); err != nil {
			b.Fatal(err)
		}
	}
}
