package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/prepare"
)

// planShape is one policy × session a call can have.
type planShape struct {
	name string
	p    sandbox.Policy
	s    sandbox.Session
}

// Paths of the plan shapes.
const (
	shapeCwd    = "/srv/project"
	shapeTD     = "/home/u/.dsh/sessions/--srv-project--/s1"
	shapeCache  = "/var/cache/build"
	shapeRefSrc = "/srv/ref/a"
)

var shapeID = Identity{UID: 1000, GID: 1001}

// planShapes are every built-in profile × workspace mode × transcript
// mode × session (none, cwd, transcript directory, both) × extra mounts
// (none, a policy mount, a mount a call added below a mountRoot, a
// tmpfs).
func planShapes(t testing.TB) []planShape {
	t.Helper()
	sessions := map[string]sandbox.Session{
		"no-session": {},
		"cwd":        {ID: "s1", Cwd: shapeCwd},
		"transcript": {ID: "s1", TranscriptDir: shapeTD},
		"both":       {ID: "s1", Cwd: shapeCwd, TranscriptDir: shapeTD, Owner: sandbox.Owner{UID: 1000, GID: 1000, Set: true}},
	}
	extras := map[string]func(sandbox.Policy) sandbox.Policy{
		"plain": func(p sandbox.Policy) sandbox.Policy { return p },
		"policy-mount": func(p sandbox.Policy) sandbox.Policy {
			p.Mounts = append(p.Mounts, sandbox.Mount{Source: shapeCache, Target: "/cache"})
			return p
		},
		"mount-root": func(p sandbox.Policy) sandbox.Policy {
			p.MountRoots = []sandbox.MountRoot{{Path: "/srv/ref", ReadOnly: true}}
			p, err := Narrow(p, Narrowing{Mounts: []sandbox.Mount{{Source: shapeRefSrc, Target: "/ref", ReadOnly: true}}})
			if err != nil {
				t.Fatalf("Narrow: %v", err)
			}
			return p
		},
		"tmpfs": func(p sandbox.Policy) sandbox.Policy {
			p.Tmpfs = append(p.Tmpfs, sandbox.Tmpfs{Target: "/scratch", SizeBytes: 1 << 20})
			return p
		},
	}
	var out []planShape
	for _, profile := range Builtins() {
		for _, ws := range sandbox.WorkspaceModes {
			for _, tr := range sandbox.TranscriptModes {
				for _, sn := range slices.Sorted(mapKeys(sessions)) {
					for _, en := range slices.Sorted(mapKeys(extras)) {
						p := builtin(t, profile)
						p.Workspace, p.Transcript = ws, tr
						p, err := Normalize(extras[en](p))
						if err != nil {
							t.Fatalf("%s/%s: %v", profile, en, err)
						}
						out = append(out, planShape{fmt.Sprintf("%s/ws-%s/tr-%s/%s/%s", profile, ws, tr, sn, en), p, sessions[sn]})
					}
				}
			}
		}
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestPlanCase: the mounts, workdir, spill and directories of every
// shape, by the rules spelled out again here.
func TestPlanCase(t *testing.T) {
	for _, sh := range planShapes(t) {
		t.Run(sh.name, func(t *testing.T) {
			got, err := Plan(sh.p, sh.s, shapeID)
			if err != nil {
				t.Fatalf("Plan() = %v", err)
			}
			byTarget := map[string]sandbox.PlanMount{}
			for i, m := range got.Mounts {
				if _, dup := byTarget[m.Target]; dup {
					t.Errorf("mount %s twice", m.Target)
				}
				byTarget[m.Target] = m
				if i > 0 && sandbox.PathDepth(got.Mounts[i-1].Target) > sandbox.PathDepth(m.Target) {
					t.Errorf("mount %d %s comes after the deeper %s; want parents first", i, m.Target, got.Mounts[i-1].Target)
				}
				if !m.NoSuid || !m.NoDev {
					t.Errorf("mount %s: nosuid %v nodev %v, want both", m.Target, m.NoSuid, m.NoDev)
				}
			}
			want := map[string]sandbox.PlanMount{
				"/tmp": {Kind: sandbox.MountTmpfs, Source: "tmpfs", Target: "/tmp", Writable: true, NoSuid: true, NoDev: true, Mode: fs.ModeSticky | 0o777},
			}
			for _, tf := range sh.p.Tmpfs {
				if tf.Target != "/tmp" {
					want[tf.Target] = sandbox.PlanMount{Kind: sandbox.MountTmpfs, Source: "tmpfs", Target: tf.Target, Writable: true, NoSuid: true, NoDev: true,
						SizeBytes: tf.SizeBytes, Mode: 0o755, Owner: &Identity{UID: 1000, GID: 1001}}
				}
			}
			wantWorkdir := "/tmp"
			if sh.s.Cwd != "" && sh.p.Workspace != sandbox.WorkspaceNone {
				want[shapeCwd] = sandbox.PlanMount{Kind: sandbox.MountWorkspace, Source: shapeCwd, Target: shapeCwd,
					Writable: sh.p.Workspace == sandbox.WorkspaceRW, NoSuid: true, NoDev: true}
				wantWorkdir = shapeCwd
			}
			inside := sh.s.TranscriptDir != "" && sh.p.Transcript == sandbox.TranscriptRO
			if inside {
				want[shapeTD] = sandbox.PlanMount{Kind: sandbox.MountTranscript, Source: shapeTD, Target: shapeTD, NoSuid: true, NoDev: true, NoExec: true}
			}
			for _, m := range sh.p.Mounts {
				k := sandbox.MountPolicy
				if m.Source == shapeRefSrc {
					k = sandbox.MountRequested
				}
				want[m.Target] = sandbox.PlanMount{Kind: k, Source: m.Source, Target: m.Target, Writable: !m.ReadOnly, NoSuid: true, NoDev: true}
			}
			if !reflect.DeepEqual(byTarget, want) {
				t.Errorf("Plan().Mounts =\n%+v\nwant\n%+v", got.Mounts, want)
			}
			if got.Workdir != wantWorkdir {
				t.Errorf("Plan().Workdir = %q, want %q", got.Workdir, wantWorkdir)
			}
			var wantDirs []sandbox.PlanDir
			wantSpill := ""
			if sh.s.TranscriptDir != "" {
				wantSpill = shapeTD + "/spill"
				var reader sandbox.Owner
				if inside {
					reader = sandbox.Owner{UID: 1000, GID: 1001, Set: true}
				}
				wantDirs = []sandbox.PlanDir{
					{Path: shapeTD, Owner: sh.s.Owner, Reader: reader, Mode: 0o700},
					{Path: wantSpill, Owner: sh.s.Owner, Reader: reader, Mode: 0o700},
				}
			}
			if got.SpillDir != wantSpill || got.SpillInside != inside || !reflect.DeepEqual(got.Dirs, wantDirs) {
				t.Errorf("Plan() spill %q inside %v dirs %+v, want %q %v %+v", got.SpillDir, got.SpillInside, got.Dirs, wantSpill, inside, wantDirs)
			}
			// Prepare reads the same plan for the workdir and the spill.
			call, err := prepare.Call(&sandbox.Request{Command: "true", Policy: sh.p, Session: sh.s}, nil, nil, nil)
			if err != nil {
				t.Fatalf("Prepare() = %v", err)
			}
			if call.Workdir != got.Workdir || call.SpillDir != got.SpillDir || call.SpillInside != got.SpillInside {
				t.Errorf("Prepare() workdir %q spill %q inside %v, want the plan's %q %q %v", call.Workdir, call.SpillDir, call.SpillInside, got.Workdir, got.SpillDir, got.SpillInside)
			}
		})
	}
}

// TestPlanOrder: parents first; at equal depth tmpfs, workspace,
// transcript, then the policy's mounts.
func TestPlanOrder(t *testing.T) {
	p := builtin(t, WorkspaceWrite)
	p.Mounts = []sandbox.Mount{{Source: "/opt/tools", Target: "/srv", ReadOnly: true}, {Source: "/var/cache/x", Target: "/a/b/c"}}
	p.Tmpfs = []sandbox.Tmpfs{{Target: "/work"}}
	s := sandbox.Session{Cwd: "/w", TranscriptDir: "/t/s1"}
	plan, err := Plan(p, s, Identity{UID: 1, GID: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range plan.Mounts {
		got = append(got, string(m.Kind)+":"+m.Target)
	}
	want := []string{"tmpfs:/tmp", "tmpfs:/work", "workspace:/w", "policy-mount:/srv", "transcript:/t/s1", "policy-mount:/a/b/c"}
	if !slices.Equal(got, want) {
		t.Errorf("Plan() order = %q, want %q", got, want)
	}
}

// TestPlanRefusesCase: a bad policy, identity or session path is an
// invalid-argument error naming the field; nothing is planned.
func TestPlanRefusesCase(t *testing.T) {
	ok := builtin(t, WorkspaceWrite)
	mount := func(target string) sandbox.Policy {
		p := builtin(t, WorkspaceWrite)
		p.Mounts = []sandbox.Mount{{Source: "/srv/x", Target: target, ReadOnly: true}}
		return p
	}
	tmpfs := builtin(t, WorkspaceWrite)
	tmpfs.Tmpfs = append(tmpfs.Tmpfs, sandbox.Tmpfs{Target: "/srv/project/cache"})
	badMode := builtin(t, WorkspaceWrite)
	badMode.Workspace = "RW"
	tests := []struct {
		name  string
		p     sandbox.Policy
		s     sandbox.Session
		id    Identity
		field string
	}{
		{"invalid workspace mode", badMode, testSession, shapeID, "workspace"},
		{"uid 4294967295", ok, testSession, Identity{UID: math.MaxUint32}, "4294967295"},
		{"relative cwd", ok, sandbox.Session{Cwd: "srv/project"}, shapeID, "session.cwd"},
		{"cwd /", ok, sandbox.Session{Cwd: "/"}, shapeID, "session.cwd"},
		{"cwd in /proc", ok, sandbox.Session{Cwd: "/proc/1"}, shapeID, "session.cwd"},
		{"transcript in /sys", ok, sandbox.Session{TranscriptDir: "/sys/x"}, shapeID, "session.transcriptDir"},
		{"transcript is the workspace", ok, sandbox.Session{Cwd: "/srv/p", TranscriptDir: "/srv/p"}, shapeID, "session.transcriptDir"},
		{"tmpfs hides the workspace", tmpfs, testSession, shapeID, "tmpfs[1].target"},
		{"mount over the workspace", mount("/srv/project"), testSession, shapeID, "mounts[0].target"},
		{"mount inside the workspace", mount("/srv/project/sub"), testSession, shapeID, "mounts[0].target"},
		{"mount around the transcript", mount("/home/u"), testSession, shapeID, "mounts[0].target"},
	}
	for _, tt := range tests {
		plan, err := Plan(tt.p, tt.s, tt.id)
		if err == nil || !strings.Contains(err.Error(), tt.field) || !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Plan(%s) = %+v, %v; want an invalid-argument error naming %q", tt.name, plan, err, tt.field)
		}
		if _, err := SpecOpts(tt.p, tt.s, tt.id.UID, tt.id.GID); err == nil {
			t.Errorf("SpecOpts(%s) = nil error, want Plan's refusal", tt.name)
		}
	}
	// Not mounted, not checked: a workspace of mode none may be anything.
	none := builtin(t, ReadOnly)
	none.Workspace = sandbox.WorkspaceNone
	if _, err := Plan(none, sandbox.Session{Cwd: "/"}, shapeID); err != nil {
		t.Errorf("Plan(workspace none, cwd /) = %v, want nil (it is not mounted)", err)
	}
}

// TestPlanEnforcedAndReported: for every shape, the OCI spec SpecOpts
// produce (what the oci and containerd backends run) and the plan text
// `policy check` prints hold exactly the plan's mounts, in its order.
func TestPlanEnforcedAndReported(t *testing.T) {
	for _, sh := range planShapes(t) {
		plan, err := Plan(sh.p, sh.s, shapeID)
		if err != nil {
			t.Fatalf("%s: Plan() = %v", sh.name, err)
		}
		spec := applied(t, sh.p, sh.s, shapeID.UID, shapeID.GID)
		if len(spec.Mounts) != len(plan.Mounts) {
			t.Fatalf("%s: spec has %d mounts, the plan %d:\n%+v\n%+v", sh.name, len(spec.Mounts), len(plan.Mounts), spec.Mounts, plan.Mounts)
		}
		for i, m := range plan.Mounts {
			if err := specMatches(spec.Mounts[i], m); err != nil {
				t.Errorf("%s: spec mount %d: %v", sh.name, i, err)
			}
		}
		lines := strings.Split(strings.TrimSuffix(ExplainPlan(plan), "\n"), "\n")
		for i, m := range plan.Mounts {
			if err := lineMatches(lines[i], m); err != nil {
				t.Errorf("%s: ExplainPlan line %d %q: %v", sh.name, i, lines[i], err)
			}
		}
		if want := "workdir: " + plan.Workdir + " "; !strings.HasPrefix(lines[len(plan.Mounts)], want) {
			t.Errorf("%s: ExplainPlan line %q, want %q…", sh.name, lines[len(plan.Mounts)], want)
		}
	}
}

// specMatches says how the OCI mount s differs from the plan's m.
func specMatches(s specs.Mount, m sandbox.PlanMount) error {
	has := func(o string) bool { return slices.Contains(s.Options, o) }
	typ := "bind"
	if !m.Bind() {
		typ = "tmpfs"
	}
	switch {
	case s.Destination != m.Target || s.Source != m.Source || s.Type != typ:
		return fmt.Errorf("%s %s from %s, want %s %s from %s", s.Type, s.Destination, s.Source, typ, m.Target, m.Source)
	case has("nosuid") != m.NoSuid || has("nodev") != m.NoDev || has("noexec") != m.NoExec:
		return fmt.Errorf("options %q, want nosuid %v nodev %v noexec %v", s.Options, m.NoSuid, m.NoDev, m.NoExec)
	case has("ro") == m.Writable:
		return fmt.Errorf("options %q, want writable %v", s.Options, m.Writable)
	case m.Bind() && (!has("bind") || has("rbind") || has("rw") != m.Writable):
		return fmt.Errorf("options %q, want a non-recursive bind, rw %v", s.Options, m.Writable)
	case m.Bind():
		return nil
	case !has("mode=" + modeString(m.Mode)):
		return fmt.Errorf("options %q, want mode %s", s.Options, modeString(m.Mode))
	case m.Owner != nil && (!has("uid="+strconv.FormatUint(uint64(m.Owner.UID), 10)) || !has("gid="+strconv.FormatUint(uint64(m.Owner.GID), 10))):
		return fmt.Errorf("options %q, want owner %+v", s.Options, *m.Owner)
	case m.Owner == nil && slices.ContainsFunc(s.Options, func(o string) bool { return strings.HasPrefix(o, "uid=") }):
		return fmt.Errorf("options %q, want no owner", s.Options)
	case (m.SizeBytes > 0) != has("size="+strconv.FormatInt(m.SizeBytes, 10)):
		return fmt.Errorf("options %q, want size %d", s.Options, m.SizeBytes)
	}
	return nil
}

// lineMatches says how an ExplainPlan line misses what the plan's m is.
func lineMatches(line string, m sandbox.PlanMount) error {
	want := []string{" " + m.Target, "nosuid", "nodev"}
	if m.Bind() {
		want = append(want, "mount "+string(m.Kind)+":", "the host's "+m.Source)
	}
	if m.Writable {
		want = append(want, "read-write")
	} else {
		want = append(want, "read-only")
	}
	for _, w := range want {
		if !strings.Contains(line, w) {
			return fmt.Errorf("lacks %q", w)
		}
	}
	if strings.Contains(line, "noexec") != m.NoExec {
		return fmt.Errorf("noexec shown %v, want %v", !m.NoExec, m.NoExec)
	}
	return nil
}

// TestExplainSession: `policy check` with a session prints its plan (a
// real workspace, so that the user resolves) and warns when the call
// would be refused.
func TestExplainSession(t *testing.T) {
	ws := t.TempDir()
	p := builtin(t, WorkspaceWrite)
	text, _ := ExplainSession(p, sandbox.Session{Cwd: ws})
	uid, gid, err := ResolveUser(p, sandbox.Session{Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Plan(p, sandbox.Session{Cwd: ws}, Identity{UID: uid, GID: gid})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(text, ExplainPlan(plan)) || !strings.Contains(text, fmt.Sprintf("run as %d:%d", uid, gid)) {
		t.Errorf("ExplainSession() = %q, want the user and ExplainPlan of the plan", text)
	}
	if text, _ := ExplainSession(p, sandbox.Session{}); text != "" {
		t.Errorf("ExplainSession(no session) = %q, want none", text)
	}
	bad := p
	bad.Tmpfs = append(bad.Tmpfs, sandbox.Tmpfs{Target: ws})
	text, warnings := ExplainSession(bad, sandbox.Session{Cwd: ws})
	if text != "" || !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "refused") }) {
		t.Errorf("ExplainSession(tmpfs over the workspace) = %q, %q; want no plan and a warning that the call is refused", text, warnings)
	}
}
