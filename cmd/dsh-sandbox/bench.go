package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/logbridge"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/containerd"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/kubernetes"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "per-call latency of each usable backend against baselines, medians and ratios",
		Description: `Runs true N times on each usable OCI runtime through the full executor (policy
workspace-write, a fresh container per call, output capture, teardown), interleaved with
baselines measured in the same run: a bare bash -c true, and a raw runc run of an
equivalent hand-made bundle. When the Docker engine and containerd answer (--docker-host,
--containerd-address), their backends run too, on a busybox image bench imports itself
(from busybox-static), against their own baselines on the same image: docker run --rm and
ctr run --rm. Each OCI runtime with a warm pool (runc, crun) also runs as a "warm"
series: one session's sequential calls through the pool (poolHits says how many found
a prepared container); so does the kubernetes backend, when a cluster answers (KUBECONFIG),
with a pod made per call ("kubernetes") and warm pods ("kubernetes warm"), against a bare
pod run through the API; its image goes into the node's containerd
(DSH_SANDBOX_KUBE_NODE_CONTAINERD). --backend picks backends. Also reports the executor's own preparation time (env, snapshot, spec,
mounts) and the growth of this process's RSS while one call streams 200 MB of output.
Prints medians and each series' ratio to its baseline; never fails on a slow result.

Example:
   dsh-sandbox bench --n 30 --json`,
		Flags: append([]cli.Flag{
			&cli.IntFlag{Name: "n", Value: 20, Usage: "calls per backend"},
			&cli.Int64Flag{Name: "stream-bytes", Value: 200_000_000, Usage: "bytes of output for the RSS measurement (0 skips it)"},
			&cli.BoolFlag{Name: "no-daemons", Usage: "measure the OCI runtimes only, not docker, containerd and kubernetes"},
			&cli.StringSliceFlag{Name: "backend", Usage: "measure only this backend (repeatable; default: every one that answers)"},
			jsonFlag,
		}, daemonFlags()...),
		Action:      runBench,
		Subcommands: []*cli.Command{benchServiceCommand()},
	}
}

// benchRow is one measured series.
type benchRow struct {
	Name        string  `json:"name"`
	MedianMs    float64 `json:"medianMs"`
	MinMs       float64 `json:"minMs"`
	MaxMs       float64 `json:"maxMs"`
	P95Ms       float64 `json:"p95Ms"`
	PrepareMs   float64 `json:"prepareMedianMs,omitempty"`
	Baseline    string  `json:"baseline,omitempty"`
	VsBaseline  float64 `json:"vsBaseline,omitempty"`
	VsBackendRc float64 `json:"vsRuncBackend,omitempty"`
	N           int     `json:"n"`
	// PoolHits is how many of a warm series' calls found a prepared
	// container (the others took the cold path).
	PoolHits int    `json:"poolHits,omitempty"`
	Error    string `json:"error,omitempty"`
}

type benchReport struct {
	Rows           []benchRow `json:"rows"`
	StreamBytes    int64      `json:"streamBytes,omitempty"`
	RSSGrowthBytes int64      `json:"rssGrowthBytes,omitempty"`
	StreamError    string     `json:"streamError,omitempty"`
}

func runBench(c *cli.Context) error {
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	n := c.Int("n")
	if n < 1 || n > 10000 {
		return usageError("--n: must be between 1 and 10000, got %d", n)
	}
	only := c.StringSlice("backend")
	for _, name := range only {
		if _, err := flagBackend("--backend", sandbox.Backend(name), nil, ""); err != nil {
			return err
		}
	}
	ctx := c.Context
	base, _ := policy.Builtin(policy.WorkspaceWrite)
	work, err := os.MkdirTemp("", "dsh-sandbox-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	b := &benchRun{ctx: ctx, s: s, base: base, work: work}
	defer b.close()
	b.add(&benchSeries{name: "bash -c true", call: func() (time.Duration, time.Duration, error) {
		start := time.Now()
		err := exec.CommandContext(ctx, "bash", "-c", "true").Run()
		return time.Since(start), 0, err
	}})
	for _, d := range backends.All() {
		if d.Bench == nil || (c.Bool("no-daemons") && d.Needs.Daemon != nil) || (len(only) > 0 && !slices.Contains(only, string(d.Name))) {
			continue
		}
		if err := b.addBackend(d); err != nil {
			return err
		}
	}

	b.measure(n, benchProgress(c))
	if err := ctx.Err(); err != nil {
		return err
	}
	rep := b.report()
	if size := c.Int64("stream-bytes"); size > 0 && b.defaultExec != nil {
		rep.StreamBytes = size
		growth, err := streamRSS(ctx, b.defaultExec, base, work, size)
		if err != nil {
			rep.StreamError = err.Error()
		}
		rep.RSSGrowthBytes = growth
	}

	if c.Bool("json") {
		return writeJSON(c.App.Writer, rep)
	}
	printBench(c.App.Writer, rep, b.defaultLabel)
	return nil
}

// benchSeries is one series of bench while it is measured.
type benchSeries struct {
	name     string
	baseline string                                       // the series' baseline, measured in the same run
	call     func() (time.Duration, time.Duration, error) // total, prepare
	samples  []time.Duration
	prepare  []time.Duration
	hits     *int // a warm series' pool hits
	err      error
}

// benchRun is one run of bench: its series, in the order they are
// measured and reported, and what closes their executors at the end.
type benchRun struct {
	ctx  context.Context
	s    *settings
	base sandbox.Policy // the policy every executor series runs under
	work string         // the calls' working directory

	all []*benchSeries
	// The default backend's default runtime is what the other series of
	// its backend are compared with, and what streams the RSS measurement.
	defaultLabel string
	defaultExec  sandbox.Executor
	tarball      []byte // the bench image, read once for every backend that needs it
	tarErr       error
	closers      []func() // run last first by close
}

func (b *benchRun) add(se *benchSeries) { b.all = append(b.all, se) }

// later registers f to run when the run closes, before what was
// registered earlier.
func (b *benchRun) later(f func()) { b.closers = append(b.closers, f) }

// close runs what later registered, last first.
func (b *benchRun) close() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
}

// benchTarball reads the bench image once, for every backend that needs it.
func (b *benchRun) benchTarball() {
	if b.tarball != nil || b.tarErr != nil {
		return
	}
	var buf bytes.Buffer
	if b.tarErr = images.BusyboxRootfsTar(&buf, images.DefaultBusyboxPath); b.tarErr != nil {
		b.tarErr = fmt.Errorf("bench image: %w (apt-get install busybox-static)", b.tarErr)
	}
	b.tarball = buf.Bytes()
}

// addBackend adds backend d's baseline and a series for each of its
// targets (and their warm pools).
func (b *benchRun) addBackend(d *backend.Descriptor) error {
	cfg, err := b.s.backendConfig(d)
	if err != nil {
		b.add(&benchSeries{name: d.Bench.Baseline, err: err})
		return nil
	}
	image := ""
	if d.Bench.Image {
		image = benchImage
		b.benchTarball()
	}
	bench := d.Bench
	ctx := b.ctx
	baseline := &benchSeries{name: bench.Baseline, call: func() (time.Duration, time.Duration, error) {
		dur, err := bench.Run(ctx, cfg, image)
		return dur, 0, err
	}}
	b.add(baseline)
	for _, t := range backends.Targets(func(x *backend.Descriptor) bool { return x == d }) {
		if err := b.addTarget(t, bench, image, baseline); err != nil {
			return err
		}
	}
	return nil
}

// addTarget adds the series of target t, and of t with its warm pool
// when it has one; image, when set, is imported into t's image store
// first. A failure to open t fails its series (and baseline, which
// needs the image too), not the run.
func (b *benchRun) addTarget(t backend.Target, bench *backend.Bench, image string, baseline *benchSeries) error {
	ctx, s := b.ctx, b.s
	ex, st, err := b.openBenchTarget(t, image)
	if err != nil {
		if image != "" { // the baseline needs the image too
			baseline.err = err
		}
		b.add(&benchSeries{name: t.Label(), err: err})
		return nil
	}
	if image != "" {
		b.later(func() { removeBenchImage(ctx, s, st) }) // before closeSt and closeEx: closers run last first
	}
	p := b.base
	p.Backend, p.Runtime = t.Name, t.Runtime
	if image != "" {
		p.Image = image
	}
	if bench.User != "" {
		p.User = sandbox.User(bench.User)
	}
	if p, err = policy.Normalize(p); err != nil {
		return err
	}
	if b.defaultLabel == "" {
		b.defaultLabel, b.defaultExec = t.Label(), ex
	}
	b.add(&benchSeries{name: t.Label(), baseline: bench.Baseline, call: timeCall(ctx, ex, p, b.work, nil)})
	// The same target with the warm pool on: one session's
	// sequential calls, each finding the container its
	// predecessor had prepared.
	s.pool = &pool.Options{}
	wex, closeW, err := s.openTarget(ctx, t)
	s.pool = nil
	if err != nil {
		return nil
	}
	b.later(closeW)
	if pe, ok := wex.(interface{ Pooled() bool }); !ok || !pe.Pooled() {
		return nil
	}
	hits := new(int)
	b.add(&benchSeries{name: t.Label() + " warm", baseline: bench.Baseline, hits: hits, call: timeCall(ctx, wex, p, b.work, hits)})
	return nil
}

// openBenchTarget opens target t's executor and, when image is set,
// imports the bench image into its image store; it registers their
// closing with the run only when both succeeded, and closes what it
// opened otherwise.
func (b *benchRun) openBenchTarget(t backend.Target, image string) (sandbox.Executor, backend.ImageStore, error) {
	ctx := b.ctx
	ex, closeEx, err := b.s.openTarget(ctx, t)
	var st backend.ImageStore
	closeSt := func() {}
	if err == nil && image != "" {
		if st, closeSt, err = benchStore(ctx, b.s, t, ex); err == nil {
			if err = b.tarErr; err == nil {
				err = st.ImportRootfs(ctx, bytes.NewReader(b.tarball), benchImage, nil)
			}
			if err != nil {
				closeSt()
			}
		}
		if err != nil {
			closeEx()
		}
	}
	if err != nil {
		return nil, nil, err
	}
	b.later(closeEx)
	if image != "" {
		b.later(closeSt)
	}
	return ex, st, nil
}

// benchProgress is where bench writes its progress: the error stream
// when it is a terminal, nowhere otherwise.
func benchProgress(c *cli.Context) io.Writer {
	if f, ok := c.App.ErrWriter.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		return f
	}
	return io.Discard
}

// measure calls the series n+1 times, interleaved so that drift of the
// machine hits all alike; the first round warms up and is not counted.
// A series that fails once is not called again. It stops calling when
// the context ends.
func (b *benchRun) measure(n int, progress io.Writer) {
	for i := range n + 1 {
		for _, se := range b.all {
			if se.err != nil || b.ctx.Err() != nil {
				continue
			}
			d, prep, err := se.call()
			if err != nil {
				se.err = err
				continue
			}
			if i > 0 {
				se.samples = append(se.samples, d)
				se.prepare = append(se.prepare, prep)
			} else if se.hits != nil {
				*se.hits = 0 // the warm-up round's is not counted either
			}
		}
		fmt.Fprintf(progress, "\rbench: round %d/%d", i, n)
	}
	fmt.Fprintln(progress)
}

// report summarizes the measured series: one row each, with its ratios
// to its baseline and to the default backend's default runtime.
func (b *benchRun) report() benchReport {
	var rep benchReport
	medians := map[string]time.Duration{}
	for _, se := range b.all {
		row := benchRow{Name: se.name, N: len(se.samples), Baseline: se.baseline}
		if se.hits != nil {
			row.PoolHits = *se.hits
		}
		if se.err != nil {
			row.Error = se.err.Error()
		}
		if len(se.samples) > 0 {
			med := median(se.samples)
			medians[se.name] = med
			row.MedianMs = ms(med)
			row.MinMs = ms(slices.Min(se.samples))
			row.MaxMs = ms(slices.Max(se.samples))
			sorted := slices.Clone(se.samples)
			slices.Sort(sorted)
			row.P95Ms = ms(percentile(sorted, 95))
			if slices.ContainsFunc(se.prepare, func(d time.Duration) bool { return d > 0 }) {
				row.PrepareMs = ms(median(se.prepare))
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	for i := range rep.Rows {
		r := &rep.Rows[i]
		if base := medians[r.Baseline]; base > 0 && r.MedianMs > 0 {
			r.VsBaseline = r.MedianMs / ms(base)
		}
		if rc := medians[b.defaultLabel]; rc > 0 && r.MedianMs > 0 && sameBackend(r.Name, b.defaultLabel) {
			r.VsBackendRc = r.MedianMs / ms(rc)
		}
	}
	return rep
}

// printBench writes rep as a table, then each series' error and the
// RSS measurement; defaultLabel names the series that streamed it.
func printBench(w io.Writer, rep benchReport, defaultLabel string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "series\tmedian ms\tp95 ms\tmin ms\tmax ms\tprepare ms\t× baseline\tbaseline\t× oci/runc\tn\t")
	for _, r := range rep.Rows {
		baseline := r.Baseline
		if baseline == "" {
			baseline = "-"
		}
		if r.Error != "" && r.N == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t%s\t-\t0\t\n", r.Name, baseline)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%d\t\n", r.Name, r.MedianMs, r.P95Ms, r.MinMs, r.MaxMs,
			optional(r.PrepareMs, "%.3f"), optional(r.VsBaseline, "%.2f"), baseline, optional(r.VsBackendRc, "%.2f"), r.N)
	}
	tw.Flush()
	for _, r := range rep.Rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Name, r.Error)
		}
	}
	if rep.StreamBytes > 0 {
		if rep.StreamError != "" {
			fmt.Fprintf(w, "streaming %d bytes: %s\n", rep.StreamBytes, rep.StreamError)
		} else {
			fmt.Fprintf(w, "RSS growth while streaming %d MB through %s: %.1f MB\n", rep.StreamBytes/1_000_000, defaultLabel, float64(rep.RSSGrowthBytes)/1e6)
		}
	}
}

// timeCall returns a series call that runs true on ex under p and times
// it from the caller's side, with the executor's own preparation time;
// hits, when set, counts the calls that came from the warm pool.
func timeCall(ctx context.Context, ex sandbox.Executor, p sandbox.Policy, work string, hits *int) func() (time.Duration, time.Duration, error) {
	return func() (time.Duration, time.Duration, error) {
		start := time.Now()
		res, err := ex.Run(ctx, &sandbox.Request{Command: "true", Policy: p, Session: sandbox.Session{Cwd: work}})
		if err == nil && hits != nil && res.Timings.Pool == sandbox.PoolHit {
			*hits++
		}
		if err == nil && sandbox.ExitCode(res, nil) != 0 {
			err = fmt.Errorf("true exited %d", sandbox.ExitCode(res, nil))
		}
		if err != nil {
			return 0, 0, err
		}
		return time.Since(start), res.Timings.Prepare, nil
	}
}

// benchImage is the image bench imports into the daemons: busybox from
// busybox-static, nothing else. Its name has a registry part: a kubelet
// finds an image in containerd only by a fully qualified name, and a
// name without one means Docker Hub's.
const benchImage = "dsh-sandbox.local/dsh-sandbox-bench:latest"

// benchStore is where bench imports its image for ex, the executor of
// target t: ex itself when its images live in its daemon; for the
// kubernetes backend, whose cluster's API cannot import an image, the
// node's containerd (kubernetes.EnvNodeContainerd), on a single-node
// cluster whose node is this host.
func benchStore(ctx context.Context, s *settings, t backend.Target, ex sandbox.Executor) (backend.ImageStore, func(), error) {
	if st, ok := ex.(backend.ImageStore); ok {
		return st, func() {}, nil
	}
	if t.Name != kubernetes.Backend {
		return nil, nil, sandbox.Errorf(sandbox.ErrInternal, "bench: the backend has no image store for the bench image")
	}
	addr := os.Getenv(kubernetes.EnvNodeContainerd)
	if addr == "" {
		return nil, nil, sandbox.Errorf(sandbox.ErrUnavailable, "bench: the cluster's API cannot import the bench image: set %s to the node's containerd socket (single-node clusters), "+
			"or import %s on every node (ctr -n %s images import)", kubernetes.EnvNodeContainerd, benchImage, kubernetes.CRINamespace)
	}
	if err := kubernetes.KubeletName(benchImage); err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(s.stateDir, "kubernetes-images")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	ce, err := containerd.New(ctx, containerd.Options{Address: addr, Namespace: kubernetes.CRINamespace, Service: driver.Service{StateDir: dir, Logger: logbridge.New(s.log)}})
	if err != nil {
		return nil, nil, err
	}
	return ce, func() { _ = ce.Close() }, nil
}

// removeBenchImage removes the bench image from st again, also when the
// run was interrupted: bench leaves nothing behind. A container still
// using it (a kubelet removes a deleted pod's containers shortly after
// the pod) makes the store refuse with ErrUnavailable: it tries again
// for at most a minute.
func removeBenchImage(ctx context.Context, s *settings, st backend.ImageStore) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
	defer cancel()
	giveUp := time.Now().Add(time.Minute)
	for {
		_, err := st.RemoveImage(ctx, benchImage)
		if err == nil {
			return
		}
		if !errors.Is(err, sandbox.ErrUnavailable) || time.Now().After(giveUp) {
			s.log.Warn().Err(err).Str("image", benchImage).Msg("bench: removing the bench image failed")
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sameBackend reports whether two series labels ("oci/runc", "oci/crun")
// name the same backend.
func sameBackend(a, b string) bool {
	ba, _, _ := strings.Cut(a, "/")
	bb, _, _ := strings.Cut(b, "/")
	return ba == bb
}

// streamRSS runs one call that writes size bytes and returns how far this
// process's peak RSS rose above its RSS before the call.
func streamRSS(ctx context.Context, ex sandbox.Executor, p sandbox.Policy, work string, size int64) (int64, error) {
	// Writing 5 to clear_refs resets the peak (VmHWM) to the current RSS.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, fmt.Errorf("resetting peak RSS: %w", err)
	}
	before, err := procStatusBytes("VmRSS")
	if err != nil {
		return 0, err
	}
	res, err := ex.Run(ctx, &sandbox.Request{
		Command: "head -c " + strconv.FormatInt(size, 10) + " /dev/zero",
		Policy:  p,
		Session: sandbox.Session{Cwd: work},
		Stdout:  io.Discard,
	})
	if err != nil {
		return 0, err
	}
	if got := int64(len(res.Stdout.Text)) + res.Stdout.DroppedBytes; got != size {
		return 0, fmt.Errorf("streamed %d bytes, want %d", got, size)
	}
	if res.Stdout.SpillPath != "" {
		os.Remove(res.Stdout.SpillPath)
	}
	peak, err := procStatusBytes("VmHWM")
	if err != nil {
		return 0, err
	}
	return peak - before, nil
}

// procStatusBytes reads a "kB" field of /proc/self/status.
func procStatusBytes(field string) (int64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/self/status has no %s", field)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func optional(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}
