package overlay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/session"
)

type label string

func TestCollectFailureCase(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name     string
		keys     []string
		resolve  ResolveFunc
		wantErr  error
		wantKey  string
		wantType string
	}{
		{"undeclared key", []string{"DSH_A"}, constant(map[string]any{"DSH_A": "a", "DSH_B": "b"}), ErrUndeclaredKey, "DSH_B", ""},
		{"another's key", []string{"DSH_A"}, constant(map[string]any{"DSH_OTHER": "x"}), ErrUndeclaredKey, "DSH_OTHER", ""},
		{"reserved key", []string{"DSH_A"}, constant(map[string]any{KeySessionJSONL: "/etc/shadow"}), ErrUndeclaredKey, KeySessionJSONL, ""},
		{"malformed key", []string{"DSH_A"}, constant(map[string]any{"PATH": "/evil"}), ErrUndeclaredKey, "PATH", ""},
		{"int value", []string{"DSH_A"}, constant(map[string]any{"DSH_A": 1}), ErrNotString, "DSH_A", "int"},
		{"bool value", []string{"DSH_A"}, constant(map[string]any{"DSH_A": true}), ErrNotString, "DSH_A", "bool"},
		{"nil value", []string{"DSH_A"}, constant(map[string]any{"DSH_A": nil}), ErrNotString, "DSH_A", "<nil>"},
		{"bytes value", []string{"DSH_A"}, constant(map[string]any{"DSH_A": []byte("a")}), ErrNotString, "DSH_A", "[]uint8"},
		{"string pointer", []string{"DSH_A"}, constant(map[string]any{"DSH_A": new("a")}), ErrNotString, "DSH_A", "*string"},
		{"named string type", []string{"DSH_A"}, constant(map[string]any{"DSH_A": label("a")}), ErrNotString, "DSH_A", "overlay.label"},
		{"NUL in value", []string{"DSH_A"}, constant(map[string]any{"DSH_A": "a\x00b"}), ErrNULInValue, "DSH_A", ""},
		{"resolver error", []string{"DSH_A"}, func(context.Context, Execution) (map[string]any, error) { return nil, boom }, boom, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRegistry()
			mustRegister(t, r, Contributor{Name: "a-good", Keys: decl("DSH_GOOD"), Resolve: constant(map[string]any{"DSH_GOOD": "g"})})
			mustRegister(t, r, Contributor{Name: "bad", Keys: decl(c.keys...), Resolve: c.resolve})
			mustRegister(t, r, Contributor{Name: "other", Keys: decl("DSH_OTHER"), Resolve: constant(nil)})

			snap, err := r.Collect(context.Background(), Execution{})
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Collect() = %v, want %v", err, c.wantErr)
			}
			var ce *CollectError
			if !errors.As(err, &ce) || ce.Contributor != "bad" || ce.Key != c.wantKey || ce.Type != c.wantType {
				t.Fatalf("Collect() error = %#v, want contributor \"bad\" key %q type %q", err, c.wantKey, c.wantType)
			}
			if snap.Len() != 0 {
				t.Errorf("Collect() returned %d keys with error %v, want none", snap.Len(), err)
			}
		})
	}
}

func TestCollectErrorMessage(t *testing.T) {
	r := NewRegistry()
	mustRegister(t, r, Contributor{Name: "bad", Keys: decl("DSH_A"), Resolve: constant(map[string]any{"DSH_A": 42})})
	_, err := r.Collect(context.Background(), Execution{})
	want := `overlay: collect: contributor "bad": key "DSH_A": resolver returned a value that is not a string (got int)`
	if err == nil || err.Error() != want {
		t.Errorf("Collect() = %v, want %s", err, want)
	}
}

func TestCollectCanceled(t *testing.T) {
	r := NewRegistry()
	ran := false
	mustRegister(t, r, Contributor{Name: "x", Keys: decl("DSH_X"), Resolve: func(context.Context, Execution) (map[string]any, error) {
		ran = true
		return nil, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Collect(ctx, Execution{})
	var ce *CollectError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &ce) || ce.Contributor != "x" {
		t.Errorf("Collect(canceled) = %v, want context.Canceled naming \"x\"", err)
	}
	if ran {
		t.Error("Collect(canceled) ran a resolver")
	}
}

func TestCollectNameOrder(t *testing.T) {
	r := NewRegistry()
	var order []string
	for i, name := range []string{"m", "b", "z", "a"} {
		key := fmt.Sprintf("DSH_K%d", i)
		mustRegister(t, r, Contributor{Name: name, Keys: decl(key), Resolve: func(context.Context, Execution) (map[string]any, error) {
			order = append(order, name)
			return nil, nil
		}})
	}
	if _, err := r.Collect(context.Background(), Execution{}); err != nil {
		t.Fatalf("Collect() = %v", err)
	}
	if want := []string{"a", "b", "m", "z"}; !reflect.DeepEqual(order, want) {
		t.Errorf("Collect() ran resolvers in order %v, want %v", order, want)
	}
}

func TestCollectSortedImmutable(t *testing.T) {
	r := NewRegistry()
	values := map[string]any{"DSH_ZED": "z", "DSH_ALPHA": "a=b", "DSH_MID": ""}
	mustRegister(t, r, Contributor{Name: "x", Keys: decl("DSH_ZED", "DSH_ALPHA", "DSH_MID", "DSH_UNSET"), Resolve: constant(values)})
	mustRegister(t, r, Contributor{Name: "a", Keys: decl("DSH_BETA"), Resolve: constant(map[string]any{"DSH_BETA": "b"})})

	snap, err := r.Collect(context.Background(), Execution{})
	if err != nil {
		t.Fatalf("Collect() = %v", err)
	}
	wantEnv := []string{"DSH_ALPHA=a=b", "DSH_BETA=b", "DSH_MID=", "DSH_ZED=z"}
	wantKeys := []string{"DSH_ALPHA", "DSH_BETA", "DSH_MID", "DSH_ZED"}
	if got := snap.Environ(); !reflect.DeepEqual(got, wantEnv) {
		t.Fatalf("Environ() = %q, want %q", got, wantEnv)
	}
	if got := snap.Keys(); !reflect.DeepEqual(got, wantKeys) {
		t.Fatalf("Keys() = %q, want %q", got, wantKeys)
	}
	if snap.Len() != 4 {
		t.Errorf("Len() = %d, want 4", snap.Len())
	}

	// Mutate everything the caller can reach.
	env := snap.Environ()
	env[0] = "DSH_ALPHA=evil"
	keys := snap.Keys()
	keys[0] = "DSH_EVIL"
	values["DSH_ZED"] = "changed"
	delete(values, "DSH_ALPHA")
	copied := snap

	if got := snap.Environ(); !reflect.DeepEqual(got, wantEnv) {
		t.Errorf("Environ() after mutations = %q, want %q", got, wantEnv)
	}
	if got := copied.Keys(); !reflect.DeepEqual(got, wantKeys) {
		t.Errorf("Keys() of copy after mutations = %q, want %q", got, wantKeys)
	}
	if v, ok := snap.Get("DSH_ZED"); !ok || v != "z" {
		t.Errorf("Get(DSH_ZED) = %q, %v, want \"z\", true", v, ok)
	}
	if v, ok := snap.Get("DSH_MID"); !ok || v != "" {
		t.Errorf("Get(DSH_MID) = %q, %v, want \"\", true", v, ok)
	}
	if v, ok := snap.Get("DSH_UNSET"); ok {
		t.Errorf("Get(DSH_UNSET) = %q, true, want absent", v)
	}
	var pairs []string
	for k, v := range snap.All() {
		pairs = append(pairs, k+"="+v)
	}
	if !reflect.DeepEqual(pairs, wantEnv) {
		t.Errorf("All() = %q, want %q", pairs, wantEnv)
	}
}

func TestSnapshotZeroValue(t *testing.T) {
	var s Snapshot
	if s.Len() != 0 || len(s.Keys()) != 0 || len(s.Environ()) != 0 {
		t.Errorf("Snapshot{} = %v, want empty", s.Environ())
	}
	if v, ok := s.Get(KeyHome); ok {
		t.Errorf("Snapshot{}.Get(%q) = %q, true, want absent", KeyHome, v)
	}
}

func TestCollectRegisterFromResolver(t *testing.T) {
	r := NewRegistry()
	var dispose func()
	mustRegister(t, r, Contributor{Name: "a", Keys: decl("DSH_A"), Resolve: func(context.Context, Execution) (map[string]any, error) {
		var err error
		dispose, err = r.Register(Contributor{Name: "b", Keys: decl("DSH_B"), Resolve: constant(map[string]any{"DSH_B": "b"})})
		return map[string]any{"DSH_A": "a"}, err
	}})
	first, err := r.Collect(context.Background(), Execution{})
	if err != nil {
		t.Fatalf("Collect() = %v", err)
	}
	if got, want := first.Keys(), []string{"DSH_A"}; !reflect.DeepEqual(got, want) {
		t.Errorf("first Collect().Keys() = %v, want %v (a registration during Collect must not affect it)", got, want)
	}
	dispose()
}

// TestCollectOverlapping runs many Collects at once, with registrations
// coming and going, and checks that every snapshot holds its own
// execution's values only. Run with -race.
func TestCollectOverlapping(t *testing.T) {
	r := NewRegistry()
	if _, err := r.RegisterBuiltIn(Contributor{Name: "session", Keys: decl(KeySessionID), Resolve: func(_ context.Context, x Execution) (map[string]any, error) {
		if x.Session == nil {
			return nil, nil
		}
		return map[string]any{KeySessionID: x.Session.ID}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, r, Contributor{Name: "echo", Keys: decl("DSH_ECHO"), Resolve: func(_ context.Context, x Execution) (map[string]any, error) {
		return map[string]any{"DSH_ECHO": x.Home}, nil
	}})

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() { // churn an unrelated contributor
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d, err := r.Register(Contributor{Name: "churn", Keys: decl("DSH_CHURN"), Resolve: constant(map[string]any{"DSH_CHURN": fmt.Sprint(i)})})
			if err != nil {
				t.Errorf("Register(churn) = %v", err)
				return
			}
			d()
		}
	})
	const workers, rounds = 8, 200
	var callers sync.WaitGroup
	for w := range workers {
		callers.Go(func() {
			for i := range rounds {
				id := fmt.Sprintf("s-%d-%d", w, i)
				x := Execution{Home: "/home-" + id, Session: &session.Header{ID: id}}
				snap, err := r.Collect(context.Background(), x)
				if err != nil {
					t.Errorf("Collect(%s) = %v", id, err)
					return
				}
				if v, _ := snap.Get(KeySessionID); v != id {
					t.Errorf("Collect(%s) %s = %q, want %q", id, KeySessionID, v, id)
				}
				if v, _ := snap.Get("DSH_ECHO"); v != x.Home {
					t.Errorf("Collect(%s) DSH_ECHO = %q, want %q", id, v, x.Home)
				}
				if keys := snap.Keys(); !slices.IsSorted(keys) {
					t.Errorf("Collect(%s).Keys() = %v, want sorted", id, keys)
				}
			}
		})
	}
	callers.Wait()
	close(stop)
	wg.Wait()
}
