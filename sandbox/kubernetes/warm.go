package kubernetes

import (
	"context"
	"slices"
	"sync"
	"time"
)

// WarmTTL is how long a warm pod waits for a call before it is replaced:
// its backstop deadline counts from its creation.
const WarmTTL = 5 * time.Minute

// warmPool keeps Options.Warm running pods of one shape, each waiting for
// one call. A pod leaves the pool for good when a call takes it.
type warmPool struct {
	e     *Executor
	shape *podShape
	ctx   context.Context
	stop  context.CancelFunc

	mu      sync.Mutex
	ready   []warmPod
	pending int
	closed  bool
	wg      sync.WaitGroup
}

type warmPod struct {
	name    string
	created time.Time
}

// pool returns the warm pool of shape, making it (and starting to fill
// it) on first use.
func (e *Executor) pool(shape *podShape) *warmPool {
	e.poolsMu.Lock()
	defer e.poolsMu.Unlock()
	p, ok := e.pools[shape.key]
	if !ok {
		ctx, stop := context.WithCancel(context.Background())
		p = &warmPool{e: e, shape: shape, ctx: ctx, stop: stop}
		e.pools[shape.key] = p
	}
	return p
}

// take hands out a ready pod, if there is one young enough, and refills
// the pool.
func (p *warmPool) take() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.fillLocked()
	for len(p.ready) > 0 {
		w := p.ready[0]
		p.ready = p.ready[1:]
		if time.Since(w.created) < WarmTTL {
			return w.name, true
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			_ = p.e.deletePod(context.Background(), w.name)
		}()
	}
	return "", false
}

// fillLocked starts making pods until ready and pending ones reach the
// pool's size.
func (p *warmPool) fillLocked() {
	for !p.closed && len(p.ready)+p.pending < p.e.opts.Warm {
		p.pending++
		p.wg.Add(1)
		go p.make()
	}
}

// make creates one warm pod and adds it to the pool once it runs.
func (p *warmPool) make() {
	defer p.wg.Done()
	name := podName()
	deadline := p.shape.deadline(WarmTTL+p.shape.maxTimeout, p.e.opts.KillGrace)
	err := p.e.createAndWait(p.ctx, p.ctx, p.shape.pod(name, p.e.opts.Namespace, p.e.instance, deadline))
	p.mu.Lock()
	p.pending--
	if err == nil && !p.closed {
		p.ready = append(p.ready, warmPod{name: name, created: time.Now()})
		p.mu.Unlock()
		// A pod no call took within WarmTTL goes, and is not replaced:
		// a shape (a session's) that gets no more calls keeps no pods.
		time.AfterFunc(WarmTTL, func() { p.expire(name) })
		return
	}
	p.mu.Unlock()
	if err != nil && p.ctx.Err() == nil {
		p.e.log.Warn().Err(err).Str("pod", name).Msg("warm pod did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = p.e.deletePod(ctx, name)
}

// expire deletes the warm pod name if it still waits for a call.
func (p *warmPool) expire(name string) {
	p.mu.Lock()
	i := slices.IndexFunc(p.ready, func(w warmPod) bool { return w.name == name })
	if i < 0 || p.closed {
		p.mu.Unlock()
		return
	}
	p.ready = slices.Delete(p.ready, i, i+1)
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.e.deletePod(ctx, name); err != nil {
		p.e.log.Warn().Err(err).Str("pod", name).Msg("expired warm pod not deleted")
	}
}

// close stops filling the pool and deletes its ready pods.
func (p *warmPool) close() error {
	p.mu.Lock()
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	p.stop()
	p.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var first error
	for _, w := range ready {
		if err := p.e.deletePod(ctx, w.name); err != nil && first == nil {
			first = err
		}
	}
	return first
}
