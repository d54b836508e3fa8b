package overlay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// constant returns a resolver that always returns values.
func constant(values map[string]any) ResolveFunc {
	return func(context.Context, Execution) (map[string]any, error) { return values, nil }
}

func decl(keys ...string) []KeyDecl {
	out := make([]KeyDecl, len(keys))
	for i, k := range keys {
		out[i] = KeyDecl{Key: k, Description: "test key " + k}
	}
	return out
}

func mustRegister(t *testing.T, r *Registry, c Contributor) func() {
	t.Helper()
	dispose, err := r.Register(c)
	if err != nil {
		t.Fatalf("Register(%q) = %v, want nil", c.Name, err)
	}
	return dispose
}

func TestRegisterFailureCase(t *testing.T) {
	ok := constant(nil)
	cases := []struct {
		name      string
		c         Contributor
		wantErr   error
		wantKey   string
		wantOwner string
	}{
		{"blank name", Contributor{Name: "", Keys: decl("DSH_X"), Resolve: ok}, ErrBlankName, "", ""},
		{"spaces name", Contributor{Name: " \t", Keys: decl("DSH_X"), Resolve: ok}, ErrBlankName, "", ""},
		{"padded name", Contributor{Name: " x", Keys: decl("DSH_X"), Resolve: ok}, ErrMalformedName, "", ""},
		{"control name", Contributor{Name: "x\ny", Keys: decl("DSH_X"), Resolve: ok}, ErrMalformedName, "", ""},
		{"duplicate name", Contributor{Name: "taken", Keys: decl("DSH_OTHER"), Resolve: ok}, ErrDuplicateName, "", ""},
		{"no resolver", Contributor{Name: "x", Keys: decl("DSH_X")}, ErrNoResolver, "", ""},
		{"no keys", Contributor{Name: "x", Resolve: ok}, ErrNoKeys, "", ""},
		{"lower-case key", Contributor{Name: "x", Keys: decl("dsh_x"), Resolve: ok}, ErrMalformedKey, "dsh_x", ""},
		{"no prefix", Contributor{Name: "x", Keys: decl("PATH"), Resolve: ok}, ErrMalformedKey, "PATH", ""},
		{"bare prefix", Contributor{Name: "x", Keys: decl("DSH_"), Resolve: ok}, ErrMalformedKey, "DSH_", ""},
		{"key with equals", Contributor{Name: "x", Keys: decl("DSH_A=B"), Resolve: ok}, ErrMalformedKey, "DSH_A=B", ""},
		{"reserved home", Contributor{Name: "x", Keys: decl("DSH_HOME"), Resolve: ok}, ErrReservedKey, "DSH_HOME", ""},
		{"reserved shell", Contributor{Name: "x", Keys: decl("DSH_SHELL"), Resolve: ok}, ErrReservedKey, "DSH_SHELL", ""},
		{"reserved session id", Contributor{Name: "x", Keys: decl("DSH_X", "DSH_SESSION_ID"), Resolve: ok}, ErrReservedKey, "DSH_SESSION_ID", ""},
		{"reserved jsonl", Contributor{Name: "x", Keys: decl("DSH_SESSION_JSONL"), Resolve: ok}, ErrReservedKey, "DSH_SESSION_JSONL", ""},
		{"missing description", Contributor{Name: "x", Keys: []KeyDecl{{Key: "DSH_X"}}, Resolve: ok}, ErrMissingDescription, "DSH_X", ""},
		{"blank description", Contributor{Name: "x", Keys: []KeyDecl{{Key: "DSH_X", Description: " \n"}}, Resolve: ok}, ErrMissingDescription, "DSH_X", ""},
		{"key declared twice", Contributor{Name: "x", Keys: decl("DSH_X", "DSH_Y", "DSH_X"), Resolve: ok}, ErrDuplicateKey, "DSH_X", ""},
		{"key owned by another", Contributor{Name: "x", Keys: decl("DSH_X", "DSH_OWNED"), Resolve: ok}, ErrKeyTaken, "DSH_OWNED", "taken"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRegistry()
			mustRegister(t, r, Contributor{Name: "taken", Keys: decl("DSH_OWNED"), Resolve: ok})
			before := r.List()

			dispose, err := r.Register(c.c)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Register(%q) = %v, want %v", c.c.Name, err, c.wantErr)
			}
			if dispose != nil {
				t.Errorf("Register(%q) returned a disposer with error %v", c.c.Name, err)
			}
			var re *RegistrationError
			if !errors.As(err, &re) {
				t.Fatalf("Register(%q) error %T, want *RegistrationError", c.c.Name, err)
			}
			if re.Contributor != c.c.Name || re.Key != c.wantKey || re.Owner != c.wantOwner {
				t.Errorf("Register(%q) error = %+v, want contributor %q key %q owner %q", c.c.Name, re, c.c.Name, c.wantKey, c.wantOwner)
			}
			if c.wantKey != "" && !strings.Contains(err.Error(), c.wantKey) {
				t.Errorf("Register(%q) message %q does not name key %q", c.c.Name, err, c.wantKey)
			}
			if after := r.List(); !reflect.DeepEqual(after, before) {
				t.Errorf("List() after failed Register = %v, want unchanged %v", after, before)
			}
		})
	}
}

func TestRegisterBuiltInFailureCase(t *testing.T) {
	ok := constant(nil)
	cases := []struct {
		name    string
		c       Contributor
		wantErr error
		wantKey string
	}{
		{"ordinary key", Contributor{Name: "b", Keys: decl("DSH_HOME", "DSH_TOOL"), Resolve: ok}, ErrNotReserved, "DSH_TOOL"},
		{"reserved key owned", Contributor{Name: "b", Keys: decl("DSH_SHELL"), Resolve: ok}, ErrKeyTaken, "DSH_SHELL"},
		{"blank name", Contributor{Name: "", Keys: decl("DSH_HOME"), Resolve: ok}, ErrBlankName, ""},
		{"duplicate name", Contributor{Name: "shell", Keys: decl("DSH_HOME"), Resolve: ok}, ErrDuplicateName, ""},
		{"missing description", Contributor{Name: "b", Keys: []KeyDecl{{Key: "DSH_HOME"}}, Resolve: ok}, ErrMissingDescription, "DSH_HOME"},
		{"malformed key", Contributor{Name: "b", Keys: decl("DSH_home"), Resolve: ok}, ErrMalformedKey, "DSH_home"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewRegistry()
			if _, err := r.RegisterBuiltIn(Contributor{Name: "shell", Keys: decl("DSH_SHELL"), Resolve: ok}); err != nil {
				t.Fatalf("RegisterBuiltIn(shell) = %v, want nil", err)
			}
			_, err := r.RegisterBuiltIn(c.c)
			var re *RegistrationError
			if !errors.Is(err, c.wantErr) || !errors.As(err, &re) || re.Key != c.wantKey {
				t.Fatalf("RegisterBuiltIn(%q) = %v, want %v on key %q", c.c.Name, err, c.wantErr, c.wantKey)
			}
		})
	}
}

func TestRegistrationErrorMessage(t *testing.T) {
	r := NewRegistry()
	mustRegister(t, r, Contributor{Name: "first", Keys: decl("DSH_X"), Resolve: constant(nil)})
	_, err := r.Register(Contributor{Name: "second", Keys: decl("DSH_X"), Resolve: constant(nil)})
	want := `overlay: register contributor "second": key "DSH_X": key is owned by another contributor (owner "first")`
	if err == nil || err.Error() != want {
		t.Errorf("Register(second) = %v, want %s", err, want)
	}
}

func TestRegistrarCannotClaimReservedKey(t *testing.T) {
	r := NewRegistry()
	g := r.Registrar()
	for _, key := range []string{KeyHome, KeyShell, KeySessionID, KeySessionJSONL} {
		_, err := g.Register(Contributor{Name: "plugin", Keys: decl(key), Resolve: constant(nil)})
		if !errors.Is(err, ErrReservedKey) {
			t.Errorf("Registrar.Register(%q) = %v, want %v", key, err, ErrReservedKey)
		}
	}
	dispose, err := g.Register(Contributor{Name: "plugin", Keys: decl("DSH_PLUGIN"), Resolve: constant(map[string]any{"DSH_PLUGIN": "v"})})
	if err != nil {
		t.Fatalf("Registrar.Register(plugin) = %v, want nil", err)
	}
	snap, err := r.Collect(context.Background(), Execution{})
	if v, _ := snap.Get("DSH_PLUGIN"); err != nil || v != "v" {
		t.Errorf("Collect() DSH_PLUGIN = %q, %v, want \"v\", nil", v, err)
	}
	dispose()
	if snap, _ := r.Collect(context.Background(), Execution{}); snap.Len() != 0 {
		t.Errorf("Collect() after dispose has %d keys, want 0", snap.Len())
	}
}

func TestRegistrarZeroValue(t *testing.T) {
	var g Registrar
	_, err := g.Register(Contributor{Name: "x", Keys: decl("DSH_X"), Resolve: constant(nil)})
	if !errors.Is(err, ErrNoRegistry) {
		t.Errorf("Registrar{}.Register(x) = %v, want %v", err, ErrNoRegistry)
	}
}

func TestRegisterCopiesDeclaration(t *testing.T) {
	r := NewRegistry()
	keys := decl("DSH_B", "DSH_A")
	mustRegister(t, r, Contributor{Name: "x", Keys: keys, Resolve: constant(map[string]any{"DSH_A": "a"})})
	keys[0] = KeyDecl{Key: "DSH_EVIL", Description: "changed after registration"}
	got := r.List()
	var found []string
	for _, d := range got {
		if d.Owner == "x" {
			found = append(found, d.Key)
		}
	}
	if want := []string{"DSH_A", "DSH_B"}; !reflect.DeepEqual(found, want) {
		t.Errorf("List() keys of x = %v, want %v", found, want)
	}
}

func TestDisposeIdempotent(t *testing.T) {
	r := NewRegistry()
	dispose := mustRegister(t, r, Contributor{Name: "x", Keys: decl("DSH_X"), Resolve: constant(map[string]any{"DSH_X": "1"})})
	mustRegister(t, r, Contributor{Name: "y", Keys: decl("DSH_Y"), Resolve: constant(map[string]any{"DSH_Y": "2"})})
	dispose()
	dispose()
	snap, err := r.Collect(context.Background(), Execution{})
	if err != nil {
		t.Fatalf("Collect() = %v", err)
	}
	if got, want := snap.Environ(), []string{"DSH_Y=2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Collect().Environ() after dispose = %v, want %v", got, want)
	}
	// The name and the key are free again.
	mustRegister(t, r, Contributor{Name: "x", Keys: decl("DSH_X"), Resolve: constant(nil)})
}

func TestDisposeStaleLeavesNewer(t *testing.T) {
	r := NewRegistry()
	first := mustRegister(t, r, Contributor{Name: "x", Keys: decl("DSH_X"), Resolve: constant(map[string]any{"DSH_X": "old"})})
	first()
	mustRegister(t, r, Contributor{Name: "x", Keys: decl("DSH_X"), Resolve: constant(map[string]any{"DSH_X": "new"})})
	first() // must not remove the second registration
	snap, err := r.Collect(context.Background(), Execution{})
	if v, ok := snap.Get("DSH_X"); err != nil || !ok || v != "new" {
		t.Errorf("Collect().Get(DSH_X) = %q, %v (err %v), want \"new\", true", v, ok, err)
	}
}

func TestDisposeBuiltInFreesReservedKey(t *testing.T) {
	r := NewRegistry()
	dispose, err := r.RegisterBuiltIn(Contributor{Name: "shell", Keys: decl(KeyShell), Resolve: constant(map[string]any{KeyShell: "1"})})
	if err != nil {
		t.Fatalf("RegisterBuiltIn(shell) = %v", err)
	}
	dispose()
	if _, err := r.Register(Contributor{Name: "plugin", Keys: decl(KeyShell), Resolve: constant(nil)}); !errors.Is(err, ErrReservedKey) {
		t.Errorf("Register(plugin, %s) after built-in disposed = %v, want %v", KeyShell, err, ErrReservedKey)
	}
	if _, err := r.RegisterBuiltIn(Contributor{Name: "shell2", Keys: decl(KeyShell), Resolve: constant(nil)}); err != nil {
		t.Errorf("RegisterBuiltIn(shell2) after dispose = %v, want nil", err)
	}
}

func TestListDoesNotRunResolvers(t *testing.T) {
	r := NewRegistry()
	fail := func(context.Context, Execution) (map[string]any, error) {
		t.Fatal("List ran a resolver")
		return nil, nil
	}
	if _, err := r.RegisterBuiltIn(Contributor{Name: "home", Keys: []KeyDecl{{Key: KeyHome, Description: "the home"}}, Resolve: fail}); err != nil {
		t.Fatalf("RegisterBuiltIn(home) = %v", err)
	}
	mustRegister(t, r, Contributor{Name: "zeta", Keys: []KeyDecl{{Key: "DSH_ZETA", Description: "z"}, {Key: "DSH_ALPHA", Description: "a"}}, Resolve: fail})

	got := r.List()
	want := []Declaration{
		{Key: "DSH_ALPHA", Owner: "zeta", Description: "a"},
		{Key: KeyHome, Owner: "home", Description: "the home", BuiltIn: true},
		{Key: KeySessionID, Description: builtInKeys[1].Description, BuiltIn: true},
		{Key: KeySessionJSONL, Description: builtInKeys[2].Description, BuiltIn: true},
		{Key: KeyShell, Description: builtInKeys[3].Description, BuiltIn: true},
		{Key: "DSH_ZETA", Owner: "zeta", Description: "z"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List() =\n%v\nwant\n%v", got, want)
	}
	got[0].Key = "DSH_CHANGED"
	if again := r.List(); again[0].Key != "DSH_ALPHA" {
		t.Errorf("List()[0].Key after caller mutation = %q, want DSH_ALPHA", again[0].Key)
	}
}

func TestZeroRegistryReservesBuiltIns(t *testing.T) {
	var r Registry
	_, err := r.Register(Contributor{Name: "x", Keys: decl(KeyHome), Resolve: constant(nil)})
	if !errors.Is(err, ErrReservedKey) {
		t.Errorf("Registry{}.Register(%s) = %v, want %v", KeyHome, err, ErrReservedKey)
	}
	if got := len(r.List()); got != 4 {
		t.Errorf("len(Registry{}.List()) = %d, want 4", got)
	}
}

func TestRegisterConcurrent(t *testing.T) {
	r := NewRegistry()
	const n = 32
	errs := make(chan error, n)
	disposers := make(chan func(), n)
	for i := range n {
		go func() {
			d, err := r.Register(Contributor{Name: fmt.Sprintf("c%02d", i), Keys: decl(fmt.Sprintf("DSH_K%02d", i)), Resolve: constant(nil)})
			errs <- err
			disposers <- d
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Register = %v", err)
		}
	}
	if got := len(r.List()); got != n+4 {
		t.Errorf("len(List()) = %d, want %d", got, n+4)
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(<-disposers)
	}
	wg.Wait()
	if got := len(r.List()); got != 4 {
		t.Errorf("len(List()) after disposing all = %d, want 4", got)
	}
}
