package pool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is a slot that counts its hand-outs and closes.
type fake struct {
	id     int64
	key    string
	dead   atomic.Bool
	closes atomic.Int32
	owner  *factory
}

func (f *fake) Alive() bool { return !f.dead.Load() }

func (f *fake) Close(context.Context) error {
	if g := f.owner.closeGate; g != nil {
		<-g
	}
	if f.closes.Add(1) != 1 {
		f.owner.t.Errorf("slot %d closed twice", f.id)
	}
	f.owner.closed.Add(1)
	return f.owner.closeErr
}

// factory prepares fake slots and records everything.
type factory struct {
	t        *testing.T
	next     atomic.Int64
	made     atomic.Int64
	closed   atomic.Int64
	calls    atomic.Int64
	fail     atomic.Bool
	closeErr error
	// gate, when set, holds every prepare until it is closed or ctx ends.
	gate chan struct{}
	// closeGate, when set, holds every Close until it is closed.
	closeGate chan struct{}

	mu    sync.Mutex
	slots []*fake
}

func (f *factory) prepare(ctx context.Context, key string) (*fake, error) {
	f.calls.Add(1)
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
		}
	}
	if f.fail.Load() {
		return nil, errors.New("prepare failed")
	}
	s := &fake{id: f.next.Add(1), key: key, owner: f}
	f.made.Add(1)
	f.mu.Lock()
	f.slots = append(f.slots, s)
	f.mu.Unlock()
	return s, nil
}

// all returns every slot made so far.
func (f *factory) all() []*fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*fake(nil), f.slots...)
}

// observer counts events.
type observer struct {
	hits, misses, prepared, failed atomic.Int64
	mu                             sync.Mutex
	destroyed                      map[Reason]int
}

func (o *observer) Took(_ string, hit bool, _ time.Duration) {
	if hit {
		o.hits.Add(1)
	} else {
		o.misses.Add(1)
	}
}

func (o *observer) Prepared(_ string, _ time.Duration, err error) {
	if err != nil {
		o.failed.Add(1)
	} else {
		o.prepared.Add(1)
	}
}

func (o *observer) Destroyed(_ string, why Reason, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.destroyed == nil {
		o.destroyed = map[Reason]int{}
	}
	o.destroyed[why]++
}

func (o *observer) count(why Reason) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.destroyed[why]
}

// eventually polls cond for up to 10 s; the pool's work is asynchronous.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func closePool[S Slot](t *testing.T, p *Pool[S]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestTakeMissThenHit(t *testing.T) {
	f := &factory{t: t}
	o := &observer{}
	p := New(f.prepare, Options{Observer: o})
	defer closePool(t, p)

	if _, ok := p.Take("a"); ok {
		t.Fatal("Take of a key never refilled = hit, want miss")
	}
	p.Refill("a")
	eventually(t, "one slot ready", func() bool { return p.Size().Ready == 1 })
	if _, ok := p.Take("b"); ok {
		t.Fatal("Take(b) took a's slot")
	}
	s, ok := p.Take("a")
	if !ok || s.key != "a" {
		t.Fatalf("Take(a) = %v, %v; want a slot of a", s, ok)
	}
	if _, ok := p.Take("a"); ok {
		t.Fatal("second Take(a) = hit with PerKey 1 and no refill")
	}
	p.Release("a", s)
	eventually(t, "released slot closed", func() bool { return s.closes.Load() == 1 })
	if o.hits.Load() != 1 || o.misses.Load() != 3 || o.prepared.Load() != 1 || o.count(Used) != 1 {
		t.Errorf("hits %d misses %d prepared %d used %d; want 1 3 1 1",
			o.hits.Load(), o.misses.Load(), o.prepared.Load(), o.count(Used))
	}
}

// TestExactlyOnce races many takers of two keys against refills: every
// slot is handed out at most once, and every slot made is closed exactly
// once by the end.
func TestExactlyOnce(t *testing.T) {
	f := &factory{t: t}
	o := &observer{}
	p := New(f.prepare, Options{PerKey: 3, Max: 5, Observer: o})

	var handed sync.Map
	var wg sync.WaitGroup
	var hits atomic.Int64
	for w := range 16 {
		key := []string{"a", "b"}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 300 {
				p.Refill(key)
				if sz := p.Size(); sz.Ready+sz.Preparing > 5 {
					t.Errorf("Size = %+v, Max is 5", sz)
				}
				runtime.Gosched()
				s, ok := p.Take(key)
				if !ok {
					continue
				}
				hits.Add(1)
				if s.key != key {
					t.Errorf("Take(%s) handed out a slot of %s", key, s.key)
				}
				if _, dup := handed.LoadOrStore(s.id, key); dup {
					t.Errorf("slot %d handed out twice", s.id)
				}
				p.Release(key, s)
			}
		}()
	}
	wg.Wait()
	closePool(t, p)

	if hits.Load() == 0 {
		t.Fatal("no Take hit at all: the race exercised nothing")
	}
	for _, s := range f.all() {
		if n := s.closes.Load(); n != 1 {
			t.Errorf("slot %d closed %d times, want 1", s.id, n)
		}
	}
	t.Logf("hits %d, misses %d, prepared %d", o.hits.Load(), o.misses.Load(), o.prepared.Load())
}

// TestMaxAcrossKeys: the cap holds across keys; a full pool makes room
// for a refilled key by evicting the ready slot of the key used least
// recently, and prepares nothing when no slot is ready to give way.
func TestMaxAcrossKeys(t *testing.T) {
	f := &factory{t: t, gate: make(chan struct{})}
	o := &observer{}
	p := New(f.prepare, Options{Max: 3, Observer: o})
	defer closePool(t, p)
	for k := range 10 {
		p.Refill(fmt.Sprint("k", k))
	}
	if got := p.Size(); got.Preparing != 3 {
		t.Errorf("Size().Preparing = %d with Max 3 and 10 keys, want 3", got.Preparing)
	}
	eventually(t, "3 prepares", func() bool { return f.calls.Load() == 3 })
	time.Sleep(20 * time.Millisecond) // a prepare started wrongly would have shown by now
	if got := f.calls.Load(); got != 3 {
		t.Errorf("prepares = %d while nothing was ready to evict, want 3", got)
	}
	close(f.gate)
	eventually(t, "3 ready", func() bool { return p.Size().Ready == 3 })
	// k0, k1, k2 hold a slot each; k5 and then k6 make room by evicting
	// the least recently used: k0, then k1.
	for _, k := range []string{"k5", "k6"} {
		p.Refill(k)
		if got := p.Size(); got.Ready+got.Preparing > 3 {
			t.Errorf("Size = %+v after Refill(%s), Max is 3", got, k)
		}
		eventually(t, "3 ready again", func() bool { return p.Size().Ready == 3 })
	}
	eventually(t, "2 evicted slots closed", func() bool { return o.count(Evicted) == 2 })
	for _, k := range []string{"k0", "k1"} {
		if _, ok := p.Take(k); ok {
			t.Errorf("Take(%s) = hit after its slot was evicted", k)
		}
	}
	for _, k := range []string{"k2", "k5", "k6"} {
		s, ok := p.Take(k)
		if !ok {
			t.Fatalf("Take(%s) = miss, want the slot it kept or made room for", k)
		}
		p.Release(k, s)
	}
}

func TestPerKey(t *testing.T) {
	f := &factory{t: t}
	p := New(f.prepare, Options{PerKey: 2})
	defer closePool(t, p)
	for range 5 {
		p.Refill("a")
	}
	eventually(t, "2 ready", func() bool { return p.Size().Ready == 2 })
	if got := f.calls.Load(); got != 2 {
		t.Errorf("prepares = %d, want PerKey = 2", got)
	}
}

func TestTTLExpiry(t *testing.T) {
	f := &factory{t: t}
	o := &observer{}
	// Idle shorter than TTL: the expired slot is not replaced.
	p := New(f.prepare, Options{TTL: 30 * time.Millisecond, Idle: time.Millisecond, Observer: o})
	defer closePool(t, p)
	p.Refill("a")
	eventually(t, "slot expired and closed", func() bool { return f.closed.Load() == 1 })
	if _, ok := p.Take("a"); ok {
		t.Error("Take after expiry = hit")
	}
	if o.count(Expired) != 1 {
		t.Errorf("destroyed as expired = %d, want 1", o.count(Expired))
	}
	time.Sleep(60 * time.Millisecond)
	if got := f.calls.Load(); got != 1 {
		t.Errorf("prepares = %d, want 1: an idle key's expired slot must not be replaced", got)
	}
}

func TestTTLReplacesWhileInUse(t *testing.T) {
	f := &factory{t: t}
	p := New(f.prepare, Options{TTL: 20 * time.Millisecond, Idle: time.Hour})
	p.Refill("a")
	eventually(t, "expired slot replaced", func() bool { return f.closed.Load() >= 1 && p.Size().Ready == 1 })
	// Replacements keep expiring every 20 ms: take one while it lasts.
	var s *fake
	eventually(t, "a replacement handed out", func() bool {
		var ok bool
		s, ok = p.Take("a")
		return ok
	})
	if s.id < 2 {
		t.Errorf("Take handed out slot %d after the first one expired, want a replacement", s.id)
	}
	p.Release("a", s)
	closePool(t, p)
	if got, made := f.closed.Load(), f.made.Load(); got != made {
		t.Errorf("closed %d of %d slots", got, made)
	}
}

func TestDeadSlotNotHandedOut(t *testing.T) {
	f := &factory{t: t}
	o := &observer{}
	p := New(f.prepare, Options{PerKey: 2, Observer: o})
	defer closePool(t, p)
	p.Refill("a")
	eventually(t, "2 ready", func() bool { return p.Size().Ready == 2 })
	slots := f.all()
	slots[0].dead.Store(true)
	s, ok := p.Take("a")
	if !ok || s != slots[1] {
		t.Fatalf("Take = %v, %v; want the live slot", s, ok)
	}
	if _, ok := p.Take("a"); ok {
		t.Error("Take with only a dead slot left = hit")
	}
	eventually(t, "dead slot closed", func() bool { return slots[0].closes.Load() == 1 })
	if o.count(Dead) != 1 {
		t.Errorf("destroyed as dead = %d, want 1", o.count(Dead))
	}
	p.Release("a", s)
}

func TestAllDeadIsMiss(t *testing.T) {
	f := &factory{t: t}
	p := New(f.prepare, Options{})
	defer closePool(t, p)
	p.Refill("a")
	eventually(t, "ready", func() bool { return p.Size().Ready == 1 })
	f.all()[0].dead.Store(true)
	if _, ok := p.Take("a"); ok {
		t.Fatal("Take handed out a dead slot")
	}
}

func TestCloseDestroysAll(t *testing.T) {
	f := &factory{t: t, gate: make(chan struct{})}
	o := &observer{}
	p := New(f.prepare, Options{PerKey: 2, Observer: o})
	// Two ready slots of a, two prepares of b held in flight.
	ungated := make(chan struct{})
	close(ungated)
	gate := f.gate
	f.gate = ungated
	p.Refill("a")
	eventually(t, "a ready", func() bool { return p.Size().Ready == 2 })
	f.gate = gate
	p.Refill("b")
	if got := p.Size(); got.Preparing != 2 {
		t.Fatalf("Size = %+v, want 2 preparing", got)
	}
	taken, _ := p.Take("a")
	p.Release("a", taken)

	// Close cancels the prepares' context: the gated ones return slots
	// that Close must destroy too.
	closePool(t, p)
	if got, made := f.closed.Load(), f.made.Load(); got != made || made != 4 {
		t.Errorf("closed %d of %d slots, want 4 of 4", got, made)
	}
	if _, ok := p.Take("a"); ok {
		t.Error("Take after Close = hit")
	}
	p.Refill("a")
	if got := f.calls.Load(); got != 4 {
		t.Errorf("prepares after Close: calls = %d, want 4", got)
	}
	if o.count(Closed) != 3 || o.count(Used) != 1 {
		t.Errorf("destroyed closed %d used %d, want 3 and 1", o.count(Closed), o.count(Used))
	}
}

func TestCloseGivesUpAtDeadline(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	p := New(func(ctx context.Context, key string) (*fake, error) {
		<-block // ignores ctx: a stuck backend
		return nil, errors.New("never")
	}, Options{})
	p.Refill("a")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close with a stuck prepare = %v, want deadline exceeded", err)
	}
}

func TestReleaseAfterCloseDestroysAtOnce(t *testing.T) {
	f := &factory{t: t}
	p := New(f.prepare, Options{})
	p.Refill("a")
	eventually(t, "ready", func() bool { return p.Size().Ready == 1 })
	s, _ := p.Take("a")
	closePool(t, p)
	p.Release("a", s)
	if s.closes.Load() != 1 {
		t.Error("Release after Close returned before the slot was closed")
	}
}

func TestFailingPrepareBacksOff(t *testing.T) {
	f := &factory{t: t}
	f.fail.Store(true)
	o := &observer{}
	p := New(f.prepare, Options{Observer: o})
	defer closePool(t, p)
	p.Refill("a")
	eventually(t, "prepare failed", func() bool { return o.failed.Load() == 1 })
	for range 1000 {
		p.Refill("a")
	}
	// The backoff (1 s) has not passed: no second prepare.
	if got := f.calls.Load(); got != 1 {
		t.Errorf("prepares after a failure and 1000 refills = %d, want 1", got)
	}
	if got := p.Size(); got.Ready+got.Preparing != 0 {
		t.Errorf("Size after a failed prepare = %+v, want nothing", got)
	}
	// Another key is not held back.
	f.fail.Store(false)
	p.Refill("b")
	eventually(t, "b ready", func() bool { return p.Size().Ready == 1 })
}

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		failures int
		want     time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {7, time.Minute}, {100, time.Minute}} {
		if got := backoff(c.failures); got != c.want {
			t.Errorf("backoff(%d) = %v, want %v", c.failures, got, c.want)
		}
	}
}

func TestTeardownErrorsReported(t *testing.T) {
	f := &factory{t: t, closeErr: errors.New("umount: busy")}
	o := &observer{}
	p := New(f.prepare, Options{Observer: o})
	p.Refill("a")
	eventually(t, "ready", func() bool { return p.Size().Ready == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err == nil || err.Error() != "umount: busy" {
		t.Errorf("Close = %v, want the slot's teardown error", err)
	}
}

func TestTeardownsBounded(t *testing.T) {
	var running, peak atomic.Int64
	release := make(chan struct{})
	p := New(func(ctx context.Context, key string) (*blocking, error) {
		return &blocking{running: &running, peak: &peak, release: release}, nil
	}, Options{Teardowns: 2, PerKey: 6})
	p.Refill("a")
	eventually(t, "6 ready", func() bool { return p.Size().Ready == 6 })
	for range 6 {
		s, ok := p.Take("a")
		if !ok {
			t.Fatal("miss with slots ready")
		}
		p.Release("a", s) // must not block although teardowns are held
	}
	eventually(t, "2 teardowns running", func() bool { return running.Load() == 2 })
	time.Sleep(20 * time.Millisecond)
	close(release)
	closePool(t, p)
	if got := peak.Load(); got != 2 {
		t.Errorf("peak concurrent teardowns = %d, want Teardowns = 2", got)
	}
}

type blocking struct {
	running, peak *atomic.Int64
	release       chan struct{}
}

func (b *blocking) Alive() bool { return true }

func (b *blocking) Close(context.Context) error {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			break
		}
	}
	<-b.release
	return nil
}

func TestIdleKeysForgotten(t *testing.T) {
	f := &factory{t: t}
	f.fail.Store(true)
	p := New(f.prepare, Options{Idle: 10 * time.Millisecond})
	defer closePool(t, p)
	p.Refill("a")
	eventually(t, "prepare failed", func() bool { return p.Size().Preparing == 0 && f.calls.Load() == 1 })
	time.Sleep(20 * time.Millisecond)
	p.Refill("b")
	if got := p.Size().Keys; got != 1 {
		t.Errorf("keys after a's idle time = %d, want 1 (b)", got)
	}
}

func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.PerKey != DefaultPerKey || o.Max != DefaultMax || o.TTL != DefaultTTL || o.Idle != DefaultIdle ||
		o.Teardowns < 1 || o.TeardownTimeout != DefaultTeardownTimeout || o.RefillDelay != DefaultRefillDelay || o.Observer == nil {
		t.Errorf("Options{}.withDefaults() = %+v", o)
	}
	o = Options{PerKey: 3, Max: 7, TTL: time.Second, Idle: time.Second, Teardowns: 5, TeardownTimeout: time.Second}.withDefaults()
	if o.PerKey != 3 || o.Max != 7 || o.TTL != time.Second || o.Idle != time.Second || o.Teardowns != 5 || o.TeardownTimeout != time.Second {
		t.Errorf("set options changed by withDefaults: %+v", o)
	}
}

type nopSlot struct{}

func (nopSlot) Alive() bool                 { return true }
func (nopSlot) Close(context.Context) error { return nil }

// BenchmarkTakeRelease measures the pool's own cost per hand-out of a
// ready slot: Take (a hit), Refill, Release; waiting for the refill to
// land is not timed, and teardown itself is free here.
func BenchmarkTakeRelease(b *testing.B) {
	p := New(func(context.Context, string) (nopSlot, error) { return nopSlot{}, nil }, Options{})
	defer p.Close(context.Background())
	p.Refill("a")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		for p.Size().Ready == 0 {
			runtime.Gosched()
		}
		b.StartTimer()
		s, ok := p.Take("a")
		if !ok {
			b.Fatal("miss with a slot ready")
		}
		p.Refill("a")
		p.Release("a", s)
	}
}

// BenchmarkMiss measures a Take that finds nothing: the cold path's cost.
func BenchmarkMiss(b *testing.B) {
	p := New(func(context.Context, string) (nopSlot, error) { return nopSlot{}, nil }, Options{})
	defer p.Close(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := p.Take("a"); ok {
			b.Fatal("hit with nothing refilled")
		}
	}
}

// TestAwaitWaitsForRunningPrepare: Await of a key whose prepare runs gets
// that prepare's slot once it is ready; a second Await, with no further
// prepare to wait for, misses at once; Await of a key with nothing
// preparing misses at once.
func TestAwaitWaitsForRunningPrepare(t *testing.T) {
	f := &factory{t: t, gate: make(chan struct{})}
	o := &observer{}
	p := New(f.prepare, Options{Observer: o, Wait: time.Minute})
	defer closePool(t, p)

	if _, ok := p.Await(context.Background(), "a"); ok {
		t.Fatal("Await of a key never refilled = hit")
	}
	p.Refill("a")
	eventually(t, "one prepare running", func() bool { return p.Size().Preparing == 1 })
	got := make(chan *fake, 1)
	go func() {
		s, _ := p.Await(context.Background(), "a")
		got <- s
	}()
	eventually(t, "the first Await waits", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.keys["a"].awaiting == 1
	})
	if _, ok := p.Await(context.Background(), "a"); ok {
		t.Fatal("a second Await took the slot the first one waits for")
	}
	close(f.gate)
	s := <-got
	if s == nil || s.key != "a" {
		t.Fatalf("the waiting Await got %v, want the prepared slot of a", s)
	}
	p.Release("a", s)
	if o.hits.Load() != 1 || o.misses.Load() != 2 {
		t.Errorf("hits %d misses %d; want 1 2", o.hits.Load(), o.misses.Load())
	}
}

// TestAwaitGivesUp: Await stops waiting when its context ends or the
// pool's Wait passes, and the slot it waited for stays in the pool.
func TestAwaitGivesUp(t *testing.T) {
	f := &factory{t: t, gate: make(chan struct{})}
	p := New(f.prepare, Options{Wait: 50 * time.Millisecond})
	defer closePool(t, p)
	p.Refill("a")
	eventually(t, "one prepare running", func() bool { return p.Size().Preparing == 1 })
	if _, ok := p.Await(context.Background(), "a"); ok {
		t.Fatal("Await past Wait = hit with the prepare still held")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := p.Await(ctx, "a"); ok {
		t.Fatal("Await with a cancelled context = hit with the prepare still held")
	}
	close(f.gate)
	eventually(t, "the slot ready", func() bool { return p.Size().Ready == 1 })
	s, ok := p.Await(context.Background(), "a")
	if !ok {
		t.Fatal("Await with a ready slot = miss")
	}
	p.Release("a", s)
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.keys["a"].awaiting; n != 0 {
		t.Errorf("awaiting = %d after every Await returned, want 0", n)
	}
}

// TestDrain: Drain destroys ready slots and those still preparing, waits
// for background teardowns, and leaves a pool that still serves.
func TestDrain(t *testing.T) {
	f := &factory{t: t, gate: make(chan struct{})}
	p := New(f.prepare, Options{})
	defer closePool(t, p)
	p.Refill("a")
	p.Refill("b")
	go func() {
		time.Sleep(20 * time.Millisecond)
		close(f.gate)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Drain(ctx); err != nil {
		t.Fatalf("Drain = %v", err)
	}
	if got := p.Size(); got.Ready != 0 || got.Preparing != 0 {
		t.Errorf("Size after Drain = %+v, want nothing ready or preparing", got)
	}
	if made, closed := f.made.Load(), f.closed.Load(); made != 2 || closed != 2 {
		t.Errorf("made %d, closed %d slots; want 2 and 2", made, closed)
	}
	p.Refill("a")
	eventually(t, "a slot ready after Drain", func() bool { return p.Size().Ready == 1 })
	s, ok := p.Take("a")
	if !ok {
		t.Fatal("Take after Drain and Refill = miss")
	}
	p.Release("a", s)
	if err := p.Drain(ctx); err != nil {
		t.Fatalf("second Drain = %v", err)
	}
	if made, closed := f.made.Load(), f.closed.Load(); closed != made {
		t.Errorf("after the released slot's teardown: made %d, closed %d", made, closed)
	}
}

// TestReleaseBacklog: past Backlog pending teardowns, Release closes the
// slot before it returns (the caller waits instead of slots piling up);
// below it, Release returns at once.
func TestReleaseBacklog(t *testing.T) {
	f := &factory{t: t, closeGate: make(chan struct{})}
	p := New(f.prepare, Options{PerKey: 3, Teardowns: 1, Backlog: 2})
	p.Refill("a")
	eventually(t, "3 ready", func() bool { return p.Size().Ready == 3 })
	var slots []*fake
	for range 3 {
		s, ok := p.Take("a")
		if !ok {
			t.Fatal("Take = miss with 3 ready")
		}
		slots = append(slots, s)
	}
	for _, s := range slots[:2] {
		done := make(chan struct{})
		go func() {
			p.Release("a", s)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Release below the backlog did not return while teardowns are held")
		}
	}
	third := make(chan struct{})
	go func() {
		p.Release("a", slots[2])
		close(third)
	}()
	select {
	case <-third:
		t.Fatal("Release past the backlog returned before its slot was closed")
	case <-time.After(50 * time.Millisecond):
	}
	close(f.closeGate)
	<-third
	if n := slots[2].closes.Load(); n != 1 {
		t.Errorf("the slot released past the backlog was closed %d times when Release returned, want 1", n)
	}
	closePool(t, p)
}

// TestRefillLater: the prepare starts when the returned function is
// called (once, however often it is called), or by itself after the
// delay; a negative delay starts it at once.
func TestRefillLater(t *testing.T) {
	t.Run("ends-first", func(t *testing.T) {
		f := &factory{t: t}
		p := New(f.prepare, Options{RefillDelay: time.Hour})
		defer closePool(t, p)
		now := p.RefillLater("a")
		time.Sleep(20 * time.Millisecond)
		if n := f.calls.Load(); n != 0 {
			t.Fatalf("prepares before the delay passed or the call ended: %d, want 0", n)
		}
		now()
		now()
		eventually(t, "one slot ready", func() bool { return p.Size().Ready == 1 })
		time.Sleep(20 * time.Millisecond)
		if n := f.calls.Load(); n != 1 {
			t.Errorf("prepares after two calls of now: %d, want 1", n)
		}
	})
	t.Run("delay-first", func(t *testing.T) {
		f := &factory{t: t}
		p := New(f.prepare, Options{RefillDelay: 10 * time.Millisecond})
		defer closePool(t, p)
		now := p.RefillLater("a")
		eventually(t, "one slot ready without now", func() bool { return p.Size().Ready == 1 })
		now()
		time.Sleep(20 * time.Millisecond)
		if n := f.calls.Load(); n != 1 {
			t.Errorf("prepares: %d, want 1 (now after the delay starts nothing more)", n)
		}
	})
	t.Run("at-once", func(t *testing.T) {
		gate := make(chan struct{})
		f := &factory{t: t, gate: gate}
		p := New(f.prepare, Options{RefillDelay: -1})
		defer closePool(t, p)
		defer close(gate)
		p.RefillLater("a")
		if s := p.Size(); s.Preparing != 1 {
			t.Errorf("right after RefillLater with a negative delay: %+v, want 1 preparing", s)
		}
	})
}
