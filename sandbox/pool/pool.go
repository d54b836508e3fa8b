// Package pool keeps slots — things that are expensive to prepare and
// serve exactly one use, such as a started container waiting for its
// call — ready ahead of demand, per key, and destroys them after use off
// the caller's path.
//
// It knows nothing of containers or backends: the caller supplies the
// function that prepares a slot for a key and the slot's own Close. Keys
// name what a slot fixes (for a container: policy digest, image, runtime,
// mount set); two requests with the same key must be able to use the same
// slot. A slot is handed out at most once, ever; a key nobody uses gets
// nothing prepared; a slot unused for TTL is destroyed.
//
// The pool imports only the standard library. Metrics are the
// caller's: it passes an Observer and reads Size. It may be imported by
// the service layers (cmd, api, mcpserver) and by backends' tests.
package pool

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// Slot is one prepared, single-use resource.
type Slot interface {
	// Alive reports whether the slot can still serve a call (for a
	// container: its stub is still running). A slot that is not alive is
	// destroyed instead of handed out. It must be cheap and must not block.
	Alive() bool
	// Close destroys the slot and everything it holds. The pool calls it
	// exactly once per slot it owns: on expiry, on Close, for a dead slot,
	// or after Release. ctx bounds the teardown.
	Close(ctx context.Context) error
}

// Observer receives the pool's events, e.g. to count them as metrics. Its
// methods are called from any goroutine, never with the pool's lock held,
// and must not block.
type Observer interface {
	// Took reports one Take of key: hit when a ready slot was handed out.
	// d is the time Take spent (including destroying dead slots' hand-off).
	Took(key string, hit bool, d time.Duration)
	// Prepared reports one finished prepare of key, taking d; err is its
	// failure or nil.
	Prepared(key string, d time.Duration, err error)
	// Destroyed reports one slot's teardown: why it was destroyed and the
	// error of its Close or nil.
	Destroyed(key string, why Reason, err error)
}

// Reason says why a slot was destroyed.
type Reason string

const (
	// Used: the slot served its call and was given back with Release.
	Used Reason = "used"
	// Expired: the slot stayed unused for the pool's TTL.
	Expired Reason = "expired"
	// Dead: the slot reported !Alive when it was about to be handed out.
	Dead Reason = "dead"
	// Closed: the pool was closed while the slot was ready or preparing.
	Closed Reason = "closed"
	// Evicted: the pool was full and a key used more recently needed the
	// room (see Options.Max).
	Evicted Reason = "evicted"
)

// Defaults of Options' zero fields.
const (
	DefaultPerKey          = 1
	DefaultMax             = 16
	DefaultTTL             = 2 * time.Minute
	DefaultIdle            = 5 * time.Minute
	DefaultTeardownTimeout = 30 * time.Second
	DefaultWait            = 5 * time.Second
	DefaultRefillDelay     = 50 * time.Millisecond
)

// After a failed prepare, a key gets no new prepare for backoffMin,
// doubling with each further failure up to backoffMax; a success resets it.
// Calls of the key keep taking the cold path meanwhile.
const (
	backoffMin = time.Second
	backoffMax = time.Minute
)

// Options configure a Pool. The zero value is usable: every zero field
// takes the default it documents.
type Options struct {
	// PerKey is the number of slots kept ready (or preparing) per key.
	// Zero means DefaultPerKey (1): a sequential caller always finds its
	// next slot, concurrent callers of one key fall back to a miss.
	PerKey int
	// Max caps the slots of all keys together, ready plus preparing. Zero
	// means DefaultMax (16). When the cap is reached, Refill makes room by
	// destroying a ready slot of the key used least recently (one slot
	// per missing one, never of the key being refilled); when nothing is
	// ready to give way, it prepares nothing. The cap holds under any
	// concurrency.
	Max int
	// TTL is how long a ready slot may wait unused before it is destroyed.
	// Zero means DefaultTTL (2 min). An expired slot of a key still in use
	// (see Idle) is replaced by a fresh one.
	TTL time.Duration
	// Idle is how long after its last Take or Refill a key stays in use:
	// an expired slot of a key idle longer is not replaced, so an idle key
	// holds nothing after at most TTL. Zero means DefaultIdle (5 min).
	Idle time.Duration
	// Teardowns caps the Close calls of slots that run at once (Release,
	// expiry, dead slots); the rest wait their turn in the background.
	// Zero means runtime.NumCPU().
	Teardowns int
	// Backlog caps the background teardowns, running and waiting: past
	// it, Release and the destruction of a dead slot close the slot in
	// the caller's goroutine before they return, so that under a load
	// the teardowns cannot follow, the callers slow down instead of
	// containers piling up. Zero means 4 × Teardowns.
	Backlog int
	// TeardownTimeout bounds one slot's Close started by the pool. Zero
	// means DefaultTeardownTimeout (30 s).
	TeardownTimeout time.Duration
	// Wait bounds how long Await waits for a prepare of its key that is
	// already running. Zero means DefaultWait (5 s).
	Wait time.Duration
	// RefillDelay is how long RefillLater waits before it starts the
	// prepares: a call runs that long (or to its end, when it ends
	// sooner) before the prepare of its session's next slot competes
	// with it for the CPU. Zero means DefaultRefillDelay (50 ms); a
	// negative value starts them at once.
	RefillDelay time.Duration
	// Observer receives the pool's events. Nil means none.
	Observer Observer
	// Logger receives failed prepares and teardowns (key and error only).
	// Nil logs nothing.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.PerKey <= 0 {
		o.PerKey = DefaultPerKey
	}
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.Teardowns <= 0 {
		o.Teardowns = runtime.NumCPU()
	}
	if o.Backlog <= 0 {
		o.Backlog = 4 * o.Teardowns
	}
	if o.TeardownTimeout <= 0 {
		o.TeardownTimeout = DefaultTeardownTimeout
	}
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	if o.RefillDelay == 0 {
		o.RefillDelay = DefaultRefillDelay
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	return o
}

type nopObserver struct{}

func (nopObserver) Took(string, bool, time.Duration)      {}
func (nopObserver) Prepared(string, time.Duration, error) {}
func (nopObserver) Destroyed(string, Reason, error)       {}

// Pool keeps slots of type S ready per key. It is safe for concurrent use.
// Create it with New; stop it with Close.
type Pool[S Slot] struct {
	prepare func(ctx context.Context, key string) (S, error)
	opts    Options

	// ctx is the context of every prepare; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// teardown is a semaphore of Options.Teardowns.
	teardown chan struct{}
	// wg counts background work (prepares, teardowns). Add happens only
	// under mu while !closed, so Close's Wait never races an Add from zero.
	wg sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	keys      map[string]*keyState[S]
	ready     int // slots ready, all keys
	preparing int // prepares running, all keys
	tearing   int // background teardowns started and not finished
	swept     time.Time
}

type keyState[S Slot] struct {
	ready     []*entry[S] // oldest first
	preparing int
	used      time.Time // last Take or Refill
	// awaiting counts the Awaits waiting for one of the key's prepares;
	// wake is closed (and replaced) whenever a prepare of the key ends.
	awaiting int
	wake     chan struct{}
	failures int
	retryAt  time.Time
}

type entry[S Slot] struct {
	slot  S
	timer *time.Timer
}

// New returns a pool that prepares slots with prepare. prepare runs in the
// background on a context that Close cancels; it returns a slot that is
// ready to be handed out, or an error (then the key backs off, see
// Refill). prepare must clean up after itself when it fails.
func New[S Slot](prepare func(ctx context.Context, key string) (S, error), opts Options) *Pool[S] {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Pool[S]{
		prepare:  prepare,
		opts:     opts,
		ctx:      ctx,
		cancel:   cancel,
		teardown: make(chan struct{}, opts.Teardowns),
		keys:     map[string]*keyState[S]{},
		swept:    time.Now(),
	}
}

// Take hands out a ready slot of key, or reports a miss (false): it never
// waits for a prepare. A slot is handed out at most once; the caller owns
// it and gives it back with Release after use. Slots that report !Alive
// are destroyed, never handed out. Take marks key as in use but prepares
// nothing: call Refill for that.
func (p *Pool[S]) Take(key string) (S, bool) {
	start := time.Now()
	for {
		e, ok := p.pop(key, start)
		if !ok {
			p.opts.Observer.Took(key, false, time.Since(start))
			var zero S
			return zero, false
		}
		if e.slot.Alive() {
			p.opts.Observer.Took(key, true, time.Since(start))
			return e.slot, true
		}
		p.destroy(key, e.slot, Dead)
	}
}

// Await is Take for a caller that would otherwise prepare a slot itself:
// when key has no ready slot but a prepare of it is running that no other
// Await is waiting for, it waits for that prepare — started earlier, it
// ends before one started now would — until ctx is done or Options.Wait
// passed. It reports a miss when it got no slot. The Observer sees one
// Took, whose duration includes the wait.
func (p *Pool[S]) Await(ctx context.Context, key string) (S, bool) {
	start := time.Now()
	var timeout <-chan time.Time
	for {
		e, wake := p.popOrWait(key, start)
		if e != nil {
			if e.slot.Alive() {
				p.opts.Observer.Took(key, true, time.Since(start))
				return e.slot, true
			}
			p.destroy(key, e.slot, Dead)
			continue
		}
		if wake == nil {
			break
		}
		if timeout == nil {
			t := time.NewTimer(p.opts.Wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-wake:
			p.unwait(key)
			continue
		case <-ctx.Done():
		case <-timeout:
		}
		p.unwait(key)
		break
	}
	p.opts.Observer.Took(key, false, time.Since(start))
	var zero S
	return zero, false
}

// popOrWait pops key's oldest ready slot; without one, it registers the
// caller as waiting for a running prepare nobody else waits for and
// returns the channel that tells when a prepare ends; else neither.
func (p *Pool[S]) popOrWait(key string, now time.Time) (*entry[S], <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.keys[key]
	if p.closed || ks == nil {
		return nil, nil
	}
	ks.used = now
	if len(ks.ready) > 0 {
		return p.popLocked(ks), nil
	}
	if ks.preparing <= ks.awaiting {
		return nil, nil
	}
	ks.awaiting++
	if ks.wake == nil {
		ks.wake = make(chan struct{})
	}
	return nil, ks.wake
}

// unwait undoes the registration of popOrWait.
func (p *Pool[S]) unwait(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ks := p.keys[key]; ks != nil && ks.awaiting > 0 {
		ks.awaiting--
	}
}

// pop removes the oldest ready slot of key.
func (p *Pool[S]) pop(key string, now time.Time) (*entry[S], bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.keys[key]
	if p.closed || ks == nil {
		return nil, false
	}
	ks.used = now
	if len(ks.ready) == 0 {
		return nil, false
	}
	return p.popLocked(ks), true
}

// popLocked removes the oldest of ks's ready slots. p.mu is held.
func (p *Pool[S]) popLocked(ks *keyState[S]) *entry[S] {
	e := ks.ready[0]
	ks.ready[0] = nil
	ks.ready = ks.ready[1:]
	p.ready--
	e.timer.Stop()
	return e
}

// Refill starts preparing slots of key in the background until key has
// PerKey slots ready or preparing, within Max; call it when a call of key
// starts, so the key's next call finds a slot. It never blocks on a
// prepare. It prepares nothing after Close, nor during the key's backoff
// after a failed prepare (1 s, doubling per failure up to 1 min).
func (p *Pool[S]) Refill(key string) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.sweep(now)
	ks := p.keys[key]
	if ks == nil {
		ks = &keyState[S]{}
		p.keys[key] = ks
	}
	ks.used = now
	p.fill(key, ks, now)
}

// RefillLater is Refill after Options.RefillDelay, or sooner: the
// returned function starts it at once if it has not started (a second
// call does nothing). A caller calls RefillLater when a call of key
// starts and the returned function when that call ends: a short call then
// runs alone, and its successor's prepare starts as soon as it is done.
func (p *Pool[S]) RefillLater(key string) (now func()) {
	if p.opts.RefillDelay < 0 {
		p.Refill(key)
		return func() {}
	}
	var once sync.Once
	refill := func() { once.Do(func() { p.Refill(key) }) }
	t := time.AfterFunc(p.opts.RefillDelay, refill)
	return func() {
		t.Stop()
		refill()
	}
}

// fill starts the prepares key lacks, evicting the least recently used
// keys' ready slots when the pool is full. p.mu is held.
func (p *Pool[S]) fill(key string, ks *keyState[S], now time.Time) {
	if now.Before(ks.retryAt) {
		return
	}
	for len(ks.ready)+ks.preparing < p.opts.PerKey {
		if p.ready+p.preparing >= p.opts.Max && !p.evict(key) {
			return
		}
		ks.preparing++
		p.preparing++
		p.wg.Add(1)
		go p.prepareOne(key)
	}
}

// evict destroys the oldest ready slot of the least recently used key
// other than key, and reports whether there was one. p.mu is held.
func (p *Pool[S]) evict(key string) bool {
	var victim string
	var vs *keyState[S]
	for k, o := range p.keys {
		if k != key && len(o.ready) > 0 && (vs == nil || o.used.Before(vs.used)) {
			victim, vs = k, o
		}
	}
	if vs == nil {
		return false
	}
	e := p.popLocked(vs)
	p.wg.Add(1)
	p.tearing++
	go func() {
		defer p.wg.Done()
		p.closeInTurn(victim, e.slot, Evicted)
	}()
	return true
}

// sweep forgets keys that hold nothing and are idle, at most once per
// Idle. p.mu is held.
func (p *Pool[S]) sweep(now time.Time) {
	if now.Sub(p.swept) < p.opts.Idle {
		return
	}
	p.swept = now
	for k, ks := range p.keys {
		if len(ks.ready) == 0 && ks.preparing == 0 && now.Sub(ks.used) >= p.opts.Idle {
			delete(p.keys, k)
		}
	}
}

func (p *Pool[S]) prepareOne(key string) {
	defer p.wg.Done()
	start := time.Now()
	s, err := p.prepare(p.ctx, key)
	d := time.Since(start)
	p.opts.Observer.Prepared(key, d, err)
	if err != nil {
		p.opts.Logger.Warn("pool: prepare failed", "key", key, "error", err)
	}

	p.mu.Lock()
	ks := p.keys[key]
	ks.preparing--
	p.preparing--
	if ks.wake != nil {
		close(ks.wake)
		ks.wake = nil
	}
	if err != nil {
		ks.failures++
		ks.retryAt = time.Now().Add(backoff(ks.failures))
		p.mu.Unlock()
		return
	}
	ks.failures = 0
	if p.closed {
		p.mu.Unlock()
		p.closeSlot(key, s, Closed)
		return
	}
	e := &entry[S]{slot: s}
	e.timer = time.AfterFunc(p.opts.TTL, func() { p.expire(key, e) })
	ks.ready = append(ks.ready, e)
	p.ready++
	p.mu.Unlock()
}

func backoff(failures int) time.Duration {
	d := backoffMin
	for i := 1; i < failures && d < backoffMax; i++ {
		d *= 2
	}
	return min(d, backoffMax)
}

// expire destroys e if it is still ready, and replaces it when its key is
// still in use.
func (p *Pool[S]) expire(key string, e *entry[S]) {
	now := time.Now()
	p.mu.Lock()
	ks := p.keys[key]
	i := -1
	if ks != nil {
		for j, r := range ks.ready {
			if r == e {
				i = j
				break
			}
		}
	}
	if p.closed || i < 0 {
		// Taken or closed meanwhile: whoever removed it owns it.
		p.mu.Unlock()
		return
	}
	ks.ready = append(ks.ready[:i], ks.ready[i+1:]...)
	p.ready--
	if now.Sub(ks.used) < p.opts.Idle {
		p.fill(key, ks, now)
	}
	p.mu.Unlock()
	p.destroy(key, e.slot, Expired)
}

// Release destroys a slot of key handed out by Take after its use, in the
// background so the caller's result is not delayed (unless Backlog
// teardowns are pending already: then before it returns); at most
// Teardowns run at once in the background. Errors go to the Observer and the Logger. After Close,
// Release destroys the slot before it returns.
func (p *Pool[S]) Release(key string, s S) {
	p.destroy(key, s, Used)
}

// destroy closes s in the background, or at once after Close or past
// the Backlog.
func (p *Pool[S]) destroy(key string, s S, why Reason) {
	p.mu.Lock()
	if p.closed || p.tearing >= p.opts.Backlog {
		p.mu.Unlock()
		p.closeSlot(key, s, why)
		return
	}
	p.wg.Add(1)
	p.tearing++
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.closeInTurn(key, s, why)
	}()
}

// closeInTurn closes s once fewer than Options.Teardowns closes run; it
// is a background teardown counted in p.tearing.
func (p *Pool[S]) closeInTurn(key string, s S, why Reason) {
	p.teardown <- struct{}{}
	defer func() { <-p.teardown }()
	p.closeSlot(key, s, why)
	p.mu.Lock()
	p.tearing--
	p.mu.Unlock()
}

// takeReady removes every ready slot of every key, with its key. p.mu is
// held.
func (p *Pool[S]) takeReady() (ready []*entry[S], keys []string) {
	for k, ks := range p.keys {
		for _, e := range ks.ready {
			e.timer.Stop()
			ready = append(ready, e)
			keys = append(keys, k)
		}
		ks.ready = nil
	}
	p.ready = 0
	return ready, keys
}

// Drain destroys every ready slot (reason Closed), also those whose
// prepare was running, and waits until no prepare or background teardown
// runs, or ctx is done; unlike Close, the pool keeps serving. It is for a
// quiescent moment — a test counting what is left on the host, an
// operator's reap — when nothing of the pool may remain: a Refill during
// Drain may leave a slot ready after it returns.
func (p *Pool[S]) Drain(ctx context.Context) error {
	for {
		p.mu.Lock()
		ready, keys := p.takeReady()
		busy := p.preparing + p.tearing
		p.mu.Unlock()
		for i, e := range ready {
			p.closeSlot(keys[i], e.slot, Closed)
		}
		if len(ready) == 0 && busy == 0 {
			return nil
		}
		if len(ready) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

func (p *Pool[S]) closeSlot(key string, s S, why Reason) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.TeardownTimeout)
	defer cancel()
	err := s.Close(ctx)
	p.opts.Observer.Destroyed(key, why, err)
	if err != nil {
		p.opts.Logger.Error("pool: slot teardown failed", "key", key, "reason", string(why), "error", err)
	}
	return err
}

// Size is a snapshot of a pool's slots.
type Size struct {
	// Ready is the number of slots ready to be handed out, all keys.
	Ready int
	// Preparing is the number of prepares running, all keys.
	Preparing int
	// Keys is the number of keys the pool tracks.
	Keys int
}

// Size returns the pool's current counts, e.g. for a gauge.
func (p *Pool[S]) Size() Size {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Size{Ready: p.ready, Preparing: p.preparing, Keys: len(p.keys)}
}

// Close stops preparing, destroys every ready slot, and waits until every
// prepare in flight has ended (its slot destroyed too) and every
// background teardown has finished, or ctx is done. It returns the errors
// of the slots it destroyed itself, and ctx's error if it gave up
// waiting. Take misses and Refill does nothing after Close; calling Close
// again waits again.
func (p *Pool[S]) Close(ctx context.Context) error {
	p.mu.Lock()
	var ready []*entry[S]
	var keys []string
	if !p.closed {
		p.closed = true
		p.cancel()
		ready, keys = p.takeReady()
	}
	p.mu.Unlock()

	errs := make([]error, len(ready))
	var wg sync.WaitGroup
	for i, e := range ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.closeSlot(keys[i], e.slot, Closed)
		}()
	}
	wg.Wait()

	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}
