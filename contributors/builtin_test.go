package contributors

import (
	"bufio"
	"context"
	"errors"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// fixedTime is the creation time of headers made in tests.
var fixedTime = time.UnixMilli(1783950000000)

// fakeLocator places every transcript under root, by session id, the way
// a JSONL store would, without touching the disk.
type fakeLocator struct {
	root string
	kind string // defaults to persistence.KindJSONL
	ok   bool
}

func (f fakeLocator) Locate(h session.Header) (persistence.Location, bool) {
	kind := f.kind
	if kind == "" {
		kind = persistence.KindJSONL
	}
	return persistence.Location{Kind: kind, Path: f.root + "/" + h.ID + "/session.jsonl"}, f.ok
}

// failingLocator fails the test when asked.
type failingLocator struct{ t *testing.T }

func (f failingLocator) Locate(session.Header) (persistence.Location, bool) {
	f.t.Error("Locate called")
	return persistence.Location{}, false
}

func installed(t *testing.T, l persistence.Locator) (*overlay.Registry, *LocatorHolder) {
	t.Helper()
	r := overlay.NewRegistry()
	var holder LocatorHolder
	holder.Set(l)
	if _, err := Install(r, holder.Get); err != nil {
		t.Fatalf("Install() = %v", err)
	}
	return r, &holder
}

func collect(t *testing.T, r *overlay.Registry, x overlay.Execution) overlay.Snapshot {
	t.Helper()
	snap, err := r.Collect(context.Background(), x)
	if err != nil {
		t.Fatalf("Collect(%+v) = %v", x, err)
	}
	return snap
}

func TestCollectBuiltInsCase(t *testing.T) {
	const home = "/srv/dsh"
	h := &session.Header{ID: "session-1", CreatedAt: 1, Cwd: "/srv/project"}
	cases := []struct {
		name    string
		locator persistence.Locator
		session *session.Header
		want    []string
	}{
		{"no agent", fakeLocator{root: "/t", ok: true}, nil,
			[]string{"DSH_HOME=" + home, "DSH_SHELL=1"}},
		{"agent with jsonl", fakeLocator{root: "/t", ok: true}, h,
			[]string{"DSH_HOME=" + home, "DSH_SESSION_ID=session-1", "DSH_SESSION_JSONL=/t/session-1/session.jsonl", "DSH_SHELL=1"}},
		{"locator not ok", fakeLocator{root: "/t", ok: false}, h,
			[]string{"DSH_HOME=" + home, "DSH_SESSION_ID=session-1", "DSH_SHELL=1"}},
		{"other kind", fakeLocator{root: "/t", kind: "sqlite", ok: true}, h,
			[]string{"DSH_HOME=" + home, "DSH_SESSION_ID=session-1", "DSH_SHELL=1"}},
		{"no persistence", nil, h,
			[]string{"DSH_HOME=" + home, "DSH_SESSION_ID=session-1", "DSH_SHELL=1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := installed(t, c.locator)
			snap := collect(t, r, overlay.Execution{Home: home, Session: c.session})
			if got := snap.Environ(); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Collect().Environ() = %q, want %q", got, c.want)
			}
		})
	}
}

func TestNoAgentDoesNotLocate(t *testing.T) {
	r, _ := installed(t, failingLocator{t})
	snap := collect(t, r, overlay.Execution{Home: "/srv/dsh"})
	if got, want := snap.Keys(), []string{overlay.KeyHome, overlay.KeyShell}; !reflect.DeepEqual(got, want) {
		t.Errorf("Collect(no agent).Keys() = %v, want %v", got, want)
	}
}

func TestCollectBuiltInsFailureCase(t *testing.T) {
	cases := []struct {
		name    string
		x       overlay.Execution
		locator persistence.Locator
		wantBy  string
	}{
		{"empty home", overlay.Execution{}, nil, NameHome},
		{"relative home", overlay.Execution{Home: "dsh"}, nil, NameHome},
		{"empty session id", overlay.Execution{Home: "/h", Session: &session.Header{}}, nil, NameSession},
		{"relative transcript", overlay.Execution{Home: "/h", Session: &session.Header{ID: "s"}}, fakeLocator{root: "rel", ok: true}, NameTranscript},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _ := installed(t, c.locator)
			_, err := r.Collect(context.Background(), c.x)
			var ce *overlay.CollectError
			if !errors.As(err, &ce) || ce.Contributor != c.wantBy {
				t.Errorf("Collect(%+v) = %v, want a *CollectError from %q", c.x, err, c.wantBy)
			}
		})
	}
}

func TestSwapLocatorAffectsOnlyLaterSnapshots(t *testing.T) {
	r, holder := installed(t, fakeLocator{root: "/first", ok: true})
	x := overlay.Execution{Home: "/srv/dsh", Session: &session.Header{ID: "s1"}}

	before := collect(t, r, x)
	holder.Set(fakeLocator{root: "/second", ok: true})
	after := collect(t, r, x)
	holder.Set(nil)
	none := collect(t, r, x)

	check := func(name string, s overlay.Snapshot, want string, wantOK bool) {
		t.Helper()
		if got, ok := s.Get(overlay.KeySessionJSONL); got != want || ok != wantOK {
			t.Errorf("%s.Get(%s) = %q, %v, want %q, %v", name, overlay.KeySessionJSONL, got, ok, want, wantOK)
		}
	}
	check("before", before, "/first/s1/session.jsonl", true)
	check("after", after, "/second/s1/session.jsonl", true)
	check("none", none, "", false)
}

func TestInstallTwiceFails(t *testing.T) {
	r, _ := installed(t, nil)
	before := r.List()
	_, err := Install(r, func() persistence.Locator { return nil })
	if !errors.Is(err, overlay.ErrDuplicateName) {
		t.Fatalf("second Install() = %v, want %v", err, overlay.ErrDuplicateName)
	}
	if after := r.List(); !reflect.DeepEqual(after, before) {
		t.Errorf("List() after failed Install = %v, want %v", after, before)
	}
}

func TestInstallUndoesPartialWork(t *testing.T) {
	r := overlay.NewRegistry()
	// A foreign built-in already owns the transcript key, so the third
	// registration fails and the first two must be undone.
	if _, err := r.RegisterBuiltIn(overlay.Contributor{
		Name:    "foreign",
		Keys:    []overlay.KeyDecl{{Key: overlay.KeySessionJSONL, Description: "x"}},
		Resolve: func(context.Context, overlay.Execution) (map[string]any, error) { return nil, nil },
	}); err != nil {
		t.Fatal(err)
	}
	before := r.List()
	_, err := Install(r, func() persistence.Locator { return nil })
	if !errors.Is(err, overlay.ErrKeyTaken) {
		t.Fatalf("Install() = %v, want %v", err, overlay.ErrKeyTaken)
	}
	if after := r.List(); !reflect.DeepEqual(after, before) {
		t.Errorf("List() after failed Install = %v, want %v", after, before)
	}
}

func TestInstallNilArgumentsCase(t *testing.T) {
	cases := []struct {
		name    string
		r       *overlay.Registry
		current func() persistence.Locator
	}{
		{"nil registry", nil, func() persistence.Locator { return nil }},
		{"nil provider", overlay.NewRegistry(), nil},
	}
	for _, c := range cases {
		if _, err := Install(c.r, c.current); err == nil {
			t.Errorf("Install(%s) = nil, want an error", c.name)
		}
	}
}

func TestInstallDispose(t *testing.T) {
	r := overlay.NewRegistry()
	dispose, err := Install(r, func() persistence.Locator { return fakeLocator{root: "/t", ok: true} })
	if err != nil {
		t.Fatal(err)
	}
	dispose()
	dispose()
	snap := collect(t, r, overlay.Execution{Home: "/h", Session: &session.Header{ID: "s"}})
	if snap.Len() != 0 {
		t.Errorf("Collect() after dispose = %v, want empty", snap.Environ())
	}
	if _, err := Install(r, func() persistence.Locator { return nil }); err != nil {
		t.Errorf("Install() after dispose = %v, want nil", err)
	}
}

func TestListAfterInstall(t *testing.T) {
	r := overlay.NewRegistry()
	if _, err := Install(r, func() persistence.Locator {
		t.Error("List asked for the current locator")
		return failingLocator{t}
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range r.List() {
		if !d.BuiltIn || d.Description == "" {
			t.Errorf("List() entry %+v, want built-in with a description", d)
		}
		got = append(got, d.Key+" "+d.Owner)
	}
	want := []string{
		"DSH_HOME " + NameHome,
		"DSH_SESSION_ID " + NameSession,
		"DSH_SESSION_JSONL " + NameTranscript,
		"DSH_SHELL " + NameHome,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List() = %q, want %q", got, want)
	}
}

// TestLocateGetsSessionHeader checks the transcript contributor asks about
// the call's own header.
func TestLocateGetsSessionHeader(t *testing.T) {
	var seen []session.Header
	var mu sync.Mutex
	rec := locatorFunc(func(h session.Header) (persistence.Location, bool) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, h)
		return persistence.Location{Kind: persistence.KindJSONL, Path: "/t/x.jsonl"}, true
	})
	r, _ := installed(t, rec)
	h := session.Spawn(session.Header{ID: "parent", Cwd: "/w"}, "preset", fixedTime)
	collect(t, r, overlay.Execution{Home: "/h", Session: &h})
	if len(seen) != 1 || !reflect.DeepEqual(seen[0], h) {
		t.Errorf("Locate saw %+v, want exactly [%+v]", seen, h)
	}
}

type locatorFunc func(session.Header) (persistence.Location, bool)

func (f locatorFunc) Locate(h session.Header) (persistence.Location, bool) { return f(h) }

// TestOverlappingCallsParentAndChild runs a parent and its subagents at
// once while the persistence is swapped; each snapshot must carry its own
// agent's facts. Run with -race.
func TestOverlappingCallsParentAndChild(t *testing.T) {
	r, holder := installed(t, fakeLocator{root: "/a", ok: true})
	parent := session.Header{ID: "parent", Cwd: "/w"}
	var agents []session.Header
	agents = append(agents, parent)
	for range 4 {
		agents = append(agents, session.Spawn(parent, "", fixedTime))
	}

	stop := make(chan struct{})
	var swapper sync.WaitGroup
	swapper.Go(func() {
		roots := []string{"/a", "/b"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				holder.Set(fakeLocator{root: roots[i%2], ok: true})
			}
		}
	})
	var calls sync.WaitGroup
	for _, a := range agents {
		calls.Go(func() {
			for range 200 {
				snap, err := r.Collect(context.Background(), overlay.Execution{Home: "/h", Session: &a})
				if err != nil {
					t.Errorf("Collect(%s) = %v", a.ID, err)
					return
				}
				id, _ := snap.Get(overlay.KeySessionID)
				path, _ := snap.Get(overlay.KeySessionJSONL)
				if id != a.ID || (path != "/a/"+a.ID+"/session.jsonl" && path != "/b/"+a.ID+"/session.jsonl") {
					t.Errorf("Collect(%s) = id %q, path %q, want the agent's own", a.ID, id, path)
					return
				}
			}
		})
	}
	calls.Wait()
	close(stop)
	swapper.Wait()
}

// TestFixtureHeaders collects the built-ins for the header of every real
// dsh session log.
func TestFixtureHeaders(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s (%v)", dir, err)
	}
	r, _ := installed(t, fakeLocator{root: "/sessions", ok: true})
	for _, f := range files {
		line := firstLine(t, f)
		line = strings.ReplaceAll(line, "{{sessionId}}", "fixture-"+filepath.Base(f))
		line = strings.ReplaceAll(line, "{{cwd}}", "/srv/fixture")
		h, err := session.Parse([]byte(line))
		if err != nil {
			t.Errorf("%s: session.Parse = %v", filepath.Base(f), err)
			continue
		}
		snap := collect(t, r, overlay.Execution{Home: "/srv/dsh", Session: &h})
		want := []string{
			"DSH_HOME=/srv/dsh",
			"DSH_SESSION_ID=" + h.ID,
			"DSH_SESSION_JSONL=/sessions/" + h.ID + "/session.jsonl",
			"DSH_SHELL=1",
		}
		if got := snap.Environ(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Environ() = %q, want %q", filepath.Base(f), got, want)
		}
	}
}

func firstLine(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	if !sc.Scan() {
		t.Fatalf("%s: no first line (%v)", path, sc.Err())
	}
	return sc.Text()
}
