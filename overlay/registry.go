package overlay

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
)

// Registry holds the registered contributors. It is safe for concurrent
// use: registration and disposal are serialized, while Collect and List
// read an immutable view and never block on them or on each other.
//
// The zero value is an empty registry ready to use; NewRegistry returns the
// same thing. In either, the built-in keys are reserved from the start.
// A Registry must not be copied after first use.
//
// Whoever holds a *Registry may install built-in contributors. Give
// third-party plugins the Registrar handle instead, which can only
// register ordinary contributors.
type Registry struct {
	mu  sync.Mutex            // serializes writers
	cur atomic.Pointer[state] // nil means empty
}

// state is an immutable view of the registry; writers replace it whole.
type state struct {
	regs  []*registration          // sorted by name
	owner map[string]*registration // declared key -> owner
	nkeys int                      // total declared keys, to size snapshots
}

// registration is one registered contributor. It is never modified after
// it is published.
type registration struct {
	name    string
	keys    []KeyDecl // sorted by key
	builtIn bool
	resolve ResolveFunc
}

// declares reports whether r declared key. Contributors declare few keys,
// so a scan beats a map.
func (r *registration) declares(key string) bool {
	for i := range r.keys {
		if r.keys[i].Key == key {
			return true
		}
	}
	return false
}

// NewRegistry returns an empty registry in which DSH_HOME, DSH_SHELL,
// DSH_SESSION_ID and DSH_SESSION_JSONL are reserved for built-ins.
func NewRegistry() *Registry {
	return &Registry{}
}

// Register adds an ordinary contributor. It fails with a
// *RegistrationError when the name is blank or malformed or already
// registered, when Resolve is nil, when no key is declared, or when a key
// is malformed, reserved, declared twice, owned by another contributor or
// lacks a description.
//
// The returned dispose function removes the contributor; it is safe to
// call more than once and from any goroutine. Snapshots collected earlier
// keep their values, and a Collect already under way may still run the
// contributor once; later Collects do not.
func (r *Registry) Register(c Contributor) (dispose func(), err error) {
	return r.add(c, false)
}

// RegisterBuiltIn adds a built-in contributor: one that declares only
// reserved keys. It is the path package contributors uses to install
// DSH_HOME, DSH_SHELL, DSH_SESSION_ID and DSH_SESSION_JSONL, and it applies
// the same checks as Register except that every declared key must be
// reserved (ErrNotReserved otherwise). A reserved key has at most one
// owner at a time. List marks these declarations as built-in.
func (r *Registry) RegisterBuiltIn(c Contributor) (dispose func(), err error) {
	return r.add(c, true)
}

func (r *Registry) add(c Contributor, builtIn bool) (func(), error) {
	reg, err := newRegistration(c, builtIn)
	if err != nil {
		return nil, err
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.load()
	if _, found := slices.BinarySearchFunc(old.regs, reg.name, byName); found {
		return nil, &RegistrationError{Contributor: c.Name, Err: ErrDuplicateName}
	}
	for _, k := range reg.keys {
		if o, taken := old.owner[k.Key]; taken {
			return nil, &RegistrationError{Contributor: c.Name, Key: k.Key, Owner: o.name, Err: ErrKeyTaken}
		}
	}

	next := &state{
		regs:  make([]*registration, 0, len(old.regs)+1),
		owner: make(map[string]*registration, len(old.owner)+len(reg.keys)),
		nkeys: old.nkeys + len(reg.keys),
	}
	next.regs = append(next.regs, old.regs...)
	i, _ := slices.BinarySearchFunc(next.regs, reg.name, byName)
	next.regs = slices.Insert(next.regs, i, reg)
	for k, o := range old.owner {
		next.owner[k] = o
	}
	for _, k := range reg.keys {
		next.owner[k.Key] = reg
	}
	r.cur.Store(next)

	var once sync.Once
	return func() { once.Do(func() { r.remove(reg) }) }, nil
}

// remove drops reg if it is still registered. Identity, not name, decides:
// an old disposer never removes a later contributor of the same name.
func (r *Registry) remove(reg *registration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.load()
	i := slices.Index(old.regs, reg)
	if i < 0 {
		return
	}
	next := &state{
		regs:  slices.Delete(slices.Clone(old.regs), i, i+1),
		owner: make(map[string]*registration, len(old.owner)),
		nkeys: old.nkeys - len(reg.keys),
	}
	for k, o := range old.owner {
		if o != reg {
			next.owner[k] = o
		}
	}
	r.cur.Store(next)
}

func (r *Registry) load() *state {
	if s := r.cur.Load(); s != nil {
		return s
	}
	return &state{}
}

func byName(r *registration, name string) int { return strings.Compare(r.name, name) }

// newRegistration validates c and returns a private copy of it.
func newRegistration(c Contributor, builtIn bool) (*registration, error) {
	fail := func(key string, class error) error {
		return &RegistrationError{Contributor: c.Name, Key: key, Err: class}
	}
	if strings.TrimSpace(c.Name) == "" {
		return nil, fail("", ErrBlankName)
	}
	if c.Name != strings.TrimSpace(c.Name) || strings.ContainsFunc(c.Name, unicode.IsControl) {
		return nil, fail("", ErrMalformedName)
	}
	if c.Resolve == nil {
		return nil, fail("", ErrNoResolver)
	}
	if len(c.Keys) == 0 {
		return nil, fail("", ErrNoKeys)
	}
	keys := slices.Clone(c.Keys)
	for _, k := range keys {
		switch {
		case !ValidKey(k.Key):
			return nil, fail(k.Key, ErrMalformedKey)
		case !builtIn && Reserved(k.Key):
			return nil, fail(k.Key, ErrReservedKey)
		case builtIn && !Reserved(k.Key):
			return nil, fail(k.Key, ErrNotReserved)
		case strings.TrimSpace(k.Description) == "":
			return nil, fail(k.Key, ErrMissingDescription)
		}
	}
	slices.SortFunc(keys, func(a, b KeyDecl) int { return strings.Compare(a.Key, b.Key) })
	for i := 1; i < len(keys); i++ {
		if keys[i].Key == keys[i-1].Key {
			return nil, fail(keys[i].Key, ErrDuplicateKey)
		}
	}
	return &registration{name: c.Name, keys: keys, builtIn: builtIn, resolve: c.Resolve}, nil
}

// Declaration describes one key for List.
type Declaration struct {
	// Key is the variable name.
	Key string
	// Owner is the name of the contributor that declared Key; empty for a
	// reserved key no built-in contributor owns yet.
	Owner string
	// Description is the owner's description of Key (for an unowned
	// reserved key, the registry's own).
	Description string
	// BuiltIn is true for the reserved keys.
	BuiltIn bool
}

// List returns every declared key plus every reserved key, sorted by key.
// It runs no resolver. The slice is the caller's to keep and modify.
func (r *Registry) List() []Declaration {
	s := r.load()
	out := make([]Declaration, 0, len(s.owner)+len(builtInKeys))
	for _, b := range builtInKeys {
		if _, owned := s.owner[b.Key]; !owned {
			out = append(out, Declaration{Key: b.Key, Description: b.Description, BuiltIn: true})
		}
	}
	for _, reg := range s.regs {
		for _, k := range reg.keys {
			out = append(out, Declaration{Key: k.Key, Owner: reg.name, Description: k.Description, BuiltIn: reg.builtIn})
		}
	}
	slices.SortFunc(out, func(a, b Declaration) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Registrar is the handle a registry's owner gives to third-party plugins:
// it registers ordinary contributors and cannot reach RegisterBuiltIn, so
// a plugin can never claim a reserved key. It is a small value, safe to
// copy and to use concurrently. The zero value refuses every registration
// with ErrNoRegistry.
type Registrar struct {
	r *Registry
}

// Registrar returns a plugin handle for r.
func (r *Registry) Registrar() Registrar { return Registrar{r: r} }

// Register is Registry.Register on the underlying registry.
func (g Registrar) Register(c Contributor) (dispose func(), err error) {
	if g.r == nil {
		return nil, &RegistrationError{Contributor: c.Name, Err: ErrNoRegistry}
	}
	return g.r.Register(c)
}
