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
	p       *podProcess
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

// take hands out a ready pod, attached and answering, if there is one
// young enough whose stream still stands, and refills the pool.
func (p *warmPool) take() (*podProcess, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.fillLocked()
	for len(p.ready) > 0 {
		w := p.ready[0]
		p.ready = p.ready[1:]
		if time.Since(w.created) < WarmTTL && w.p.live() {
			return w.p, true
		}
		w.p.close()
		p.e.deleteLater(w.p.name)
	}
	return nil, false
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

// make creates one warm pod, attaches to its stub and adds it to the
// pool once the stub answers.
func (p *warmPool) make() {
	defer p.wg.Done()
	name := podName()
	deadline := p.shape.deadline(WarmTTL+p.shape.maxTimeout, p.e.opts.KillGrace)
	err := p.e.createAndWait(p.ctx, p.ctx, p.e.newPod(p.shape, name, deadline))
	var att *podProcess
	if err == nil {
		att, err = p.e.attach(p.ctx, name)
	}
	p.mu.Lock()
	p.pending--
	if err == nil && !p.closed {
		p.ready = append(p.ready, warmPod{p: att, created: time.Now()})
		p.mu.Unlock()
		// A pod no call took within WarmTTL goes, and is not replaced:
		// a shape (a session's) that gets no more calls keeps no pods.
		time.AfterFunc(WarmTTL, func() { p.expire(name) })
		return
	}
	p.mu.Unlock()
	if att != nil {
		att.close()
	}
	if err != nil && p.ctx.Err() == nil {
		p.e.opts.Logger.Warn("warm pod did not start", "error", err, "pod", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = p.e.deletePod(ctx, name)
}

// expire deletes the warm pod name if it still waits for a call.
func (p *warmPool) expire(name string) {
	p.mu.Lock()
	i := slices.IndexFunc(p.ready, func(w warmPod) bool { return w.p.name == name })
	if i < 0 || p.closed {
		p.mu.Unlock()
		return
	}
	att := p.ready[i].p
	p.ready = slices.Delete(p.ready, i, i+1)
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	att.close()
	if err := p.e.deletePod(ctx, name); err != nil {
		p.e.opts.Logger.Warn("expired warm pod not deleted", "error", err, "pod", name)
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
		w.p.close()
		if err := p.e.deletePod(ctx, w.p.name); err != nil && first == nil {
			first = err
		}
	}
	return first
}
