package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the HTTP/JSON service on a Unix socket (default) and optionally TCP",
		Description: `Serves the /v1 API (see GET /v1/openapi.yaml): foreground runs (one JSON result or an
NDJSON stream), background jobs, DSH_* declarations, snapshot preview, locate, health and
GET /metrics. A request names its session header and a policy by name; the service builds
the DSH_* snapshot itself. The socket is 0600 in a 0700 directory; a TCP listener needs
--token-file (a 0600 file) and is loopback-only unless --allow-remote. On SIGTERM it stops
accepting, lets calls finish for --shutdown-grace, then cancels and tears them down.
GET /v1/calls lists the caller's running calls and jobs; DELETE /v1/calls/{id} cancels one.

Operations: it logs at info (unless --log-level says otherwise) each address it serves,
each call (id, session, client, policy, backend, outcome, duration; never command text or
environment values), each reload, and its stop (SIGTERM or SIGINT: "stopping", then "stopped"). SIGHUP reopens the audit log at its path (rotate by renaming the file,
then SIGHUP: the new file's hash chain starts again, and the log line "audit log reopened"
names the old file's head hash) and reloads the policies (built-ins and --policy-file); what
fails to reload keeps the old and is logged. Started by systemd with socket activation
(LISTEN_PID, LISTEN_FDS), it serves the inherited sockets, plus any --listen; see
contrib/systemd/.

Every client is identified: a socket peer by its uid (SO_PEERCRED), a TCP client by the
name of its token. A client may use as workspace only a directory that resolves without
links, is not a system directory, lies in --workspace-roots (and its token's roots), is
owned by it (socket peers other than root), and holds neither the dsh home, the sessions
root, the state or data dir nor the socket; sessions and jobs are visible only to the
client that created them. A socket peer that is itself a sandboxed call is refused.
Background jobs count against --max-concurrent and --max-queue like foreground calls.

Token file: ` + api.TokenFileHelp + `

Examples:
   dsh-sandbox serve
   dsh-sandbox serve --listen unix:///run/dsh/sandbox.sock --listen tcp://127.0.0.1:7070 --token-file /etc/dsh/token
   dsh-sandbox exec --server unix:///run/dsh/sandbox.sock --session-id s1 -- ls`,
		Flags: append([]cli.Flag{
			&cli.StringSliceFlag{Name: "listen", Usage: "`ADDR` to serve: unix:///PATH or tcp://HOST:PORT (repeatable; default unix://<home>/run/sandbox.sock)"},
			&cli.StringFlag{Name: "token-file", Usage: "`FILE` (mode 0600) with the bearer tokens of TCP clients: one token, or lines NAME TOKEN [ROOTS] [harness] (see the description)"},
			&cli.BoolFlag{Name: "allow-remote", Usage: "allow a TCP listener on a non-loopback address"},
			&cli.IntFlag{Name: "max-concurrent", Value: api.DefaultMaxConcurrent, Usage: "executions at once (foreground calls and background jobs)"},
			&cli.IntFlag{Name: "max-queue", Value: api.DefaultMaxQueue, Usage: "executions waiting for a slot before 429 (0: none wait)"},
			&cli.StringFlag{Name: "max-stdin", Value: "1Gi", Usage: "bound `SIZE` of the stdin one call streams (a foreground run's stdin part, or all a job is sent); past it 413 naming stdin"},
			&cli.IntFlag{Name: "max-jobs-per-session", Value: api.DefaultMaxJobsPerSession, Usage: "background jobs of one session that have not ended before 429 (0: no limit)"},
			&cli.DurationFlag{Name: "job-ttl", Value: api.DefaultJobTTL, Usage: "how long an ended background job stays readable (0: until removed)"},
			&cli.StringFlag{Name: "audit-log", Usage: "audit log `FILE` (JSONL, hash-chained; default <data-dir>/audit.jsonl; \"none\" disables)"},
			&cli.StringFlag{Name: "audit-key", Usage: "operator key `FILE` (0600 or 0400, owned by root or you, outside --data-dir): every audit record and the checkpoint carry an HMAC under it"},
			&cli.StringFlag{Name: "audit-checkpoint", Usage: "`FILE` holding the audit log's record count and head after each record, to detect a cut or rewritten tail (default <audit-log>.checkpoint; keep it apart from the log)"},
			&cli.StringSliceFlag{Name: "policy-file", Usage: "extra policy `FILE` requests may name (repeatable; the built-ins are always known)"},
			&cli.StringFlag{Name: "policy-dir", Usage: "`DIR` whose *.yaml, *.yml and *.json files are policies requests may name, as with --policy-file (listed again on SIGHUP)"},
			&cli.DurationFlag{Name: "shutdown-grace", Value: 30 * time.Second, Usage: "how long running calls may finish on shutdown"},
		}, append(poolFlags(), daemonFlags()...)...),
		Action: runServe,
	}
}

func runServe(c *cli.Context) error {
	// SIGHUP reloads from the start; before this it would kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	f, err := readServeFlags(c, s)
	if err != nil {
		return err
	}
	// After the flags are checked (a usage error is one, whoever holds
	// the lock), before any socket or file of the service is touched.
	lock, err := lockDataDir(s.dataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	var ls serveListeners
	defer ls.close()
	inherited, err := ls.inherit(f.tokens, c.Bool("allow-remote"))
	if err != nil {
		return err
	}
	listens := c.StringSlice("listen")
	if len(listens) == 0 && len(inherited) == 0 {
		listens = []string{"unix://" + filepath.Join(s.home, "run", "sandbox.sock")}
	}
	auditPath := c.String("audit-log")
	if auditPath == "" {
		auditPath = filepath.Join(s.dataDir, "audit.jsonl")
	}
	deployed := slices.Clone(listens)
	for _, l := range inherited {
		deployed = append(deployed, api.ListenerAddress(l))
	}
	auditFiles, err := serveAuditFiles(c, auditPath)
	if err != nil {
		return err
	}
	protected, err := checkDeployment(s, deployed, auditFiles)
	if err != nil {
		return err
	}
	if err := ls.listen(listens, f.tokens, c.Bool("allow-remote")); err != nil {
		return err
	}
	return s.serve(c, f, ls.list, hup, auditPath, auditFiles, protected)
}

// serve runs the service on listeners, checked and open: it reaps what
// earlier runs left, opens the audit log at auditPath ("none": no log),
// serves until stopped and closes the executors and the log.
func (s *settings) serve(c *cli.Context, f serveFlags, listeners []serveListener, hup <-chan os.Signal, auditPath string, auditFiles, protected map[string]string) error {
	router := &executorRouter{s: s}
	poolSize := router.poolSize
	f.pm.size.Store(&poolSize)
	defer router.close()
	leaked, err := router.reapAll(c.Context, f.policies)
	if err != nil {
		return err
	}
	var audit *api.AuditLog
	if auditPath != "none" {
		if err := os.MkdirAll(filepath.Dir(auditPath), 0o700); err != nil {
			return sandbox.Errorf(sandbox.ErrUnavailable, "--audit-log: %v", err)
		}
		if audit, err = s.openAudit(c, auditFiles); err != nil {
			return err
		}
		defer audit.Close()
	}
	reg, err := s.registry()
	if err != nil {
		return err
	}
	srv, err := api.NewServer(api.Options{
		Executor:          router,
		Policies:          f.policies,
		Registry:          reg,
		Locator:           s.locator,
		Home:              s.home,
		SessionsRoot:      s.sessionsRoot,
		MaxConcurrent:     c.Int("max-concurrent"),
		MaxQueue:          queueFlag(c.Int("max-queue")),
		MaxJobsPerSession: queueFlag(c.Int("max-jobs-per-session")),
		MaxStdinBytes:     f.maxStdin,
		JobTTL:            ttlFlag(c.Duration("job-ttl")),
		WorkspaceRoots:    s.workspaceRoots,
		ProtectedPaths:    protected,
		Audit:             audit,
		LeakedObjects:     func() float64 { return float64(leaked) },
		Collectors:        f.pm.collectors(),
		Logger:            s.log,
		Detector:          detector,
	})
	if err != nil {
		return err
	}
	return s.serveUntilStopped(c, srv, listeners, hup, func() { s.reload(srv, audit, auditPath, f.policyFiles) })
}

// serveFlags are serve's own flags, checked, and what they load.
type serveFlags struct {
	maxStdin    int64
	pm          *poolMetrics
	policyFiles func() ([]string, error) // --policy-file and --policy-dir's files, listed again on each call
	policies    map[string]sandbox.Policy
	tokens      []api.TokenClient
}

// readServeFlags checks serve's flags and loads the policies and tokens
// they name; it sets s's log level and warm pool for the service.
func readServeFlags(c *cli.Context, s *settings) (serveFlags, error) {
	var f serveFlags
	maxStdin, err := policy.ParseSize(c.String("max-stdin"))
	if err != nil || maxStdin <= 0 {
		return f, usageError("--max-stdin: %q: want a positive size such as 1Gi or 64Mi", c.String("max-stdin"))
	}
	f.maxStdin = maxStdin
	if !newFlags(c).IsSet("log-level") {
		s.log = s.log.Level(zerolog.InfoLevel) // the service says where it listens and logs each call
	}
	f.pm = newPoolMetrics()
	if s.pool, err = poolOptions(c, f.pm); err != nil {
		return f, err
	}
	f.policyFiles = func() ([]string, error) {
		return servePolicyFiles(c.StringSlice("policy-file"), c.String("policy-dir"))
	}
	files, err := f.policyFiles()
	if err != nil {
		return f, err
	}
	if f.policies, err = s.servePolicies(files); err != nil {
		return f, err
	}
	if file := c.String("token-file"); file != "" {
		if f.tokens, err = api.ReadTokens(file); err != nil {
			return f, usageError("--token-file: %v", err)
		}
	}
	return f, nil
}

// serveListener is one listener of the service and the tokens of its
// clients (none for a Unix socket).
type serveListener struct {
	l         net.Listener
	tokens    []api.TokenClient
	inherited bool
}

// serveListeners are the service's listeners; close closes them all.
type serveListeners struct {
	list []serveListener
}

func (ls *serveListeners) close() {
	for _, b := range ls.list {
		b.l.Close()
	}
}

// inherit adds the listeners systemd passed (socket activation) and
// returns them; an inherited TCP listener needs tokens, and a loopback
// address unless allowRemote.
func (ls *serveListeners) inherit(tokens []api.TokenClient, allowRemote bool) ([]net.Listener, error) {
	inherited, err := api.InheritedListeners()
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "%v", err)
	}
	for _, l := range inherited {
		ls.list = append(ls.list, serveListener{l: l, inherited: true})
	}
	for i, b := range ls.list {
		if _, ok := b.l.(*net.TCPListener); !ok {
			continue
		}
		if len(tokens) == 0 {
			return nil, usageError("inherited listener %s: a TCP listener needs --token-file", b.l.Addr())
		}
		if err := api.CheckInheritedTCP(b.l, allowRemote); err != nil {
			return nil, usageError("%v", err)
		}
		ls.list[i].tokens = tokens
	}
	return inherited, nil
}

// listen opens a listener on each --listen address; a TCP one needs
// tokens, and a loopback address unless allowRemote.
func (ls *serveListeners) listen(listens []string, tokens []api.TokenClient, allowRemote bool) error {
	for _, addr := range listens {
		scheme, target, err := types.ParseListen(addr)
		if err != nil {
			return usageError("--listen: %v", err)
		}
		var l net.Listener
		var toks []api.TokenClient
		switch scheme {
		case types.SchemeUnix:
			l, err = api.ListenUnix(target)
		case types.SchemeTCP:
			if len(tokens) == 0 {
				return usageError("--listen %s: a TCP listener needs --token-file", addr)
			}
			toks = tokens
			l, err = api.ListenTCP(target, allowRemote)
		}
		if err != nil {
			return sandbox.Errorf(sandbox.ErrUnavailable, "--listen: %v", err)
		}
		ls.list = append(ls.list, serveListener{l: l, tokens: toks})
	}
	return nil
}

// serveUntilStopped serves srv on listeners until the context ends or a
// listener fails, calling reload on each SIGHUP (from hup); then it lets
// running calls finish for --shutdown-grace and shuts srv down.
func (s *settings) serveUntilStopped(c *cli.Context, srv *api.Server, listeners []serveListener, hup <-chan os.Signal, reload func()) error {
	errc := make(chan error, len(listeners))
	for _, b := range listeners {
		go func() { errc <- srv.ServeClients(b.l, b.tokens) }()
		s.log.Info().Str("listen", api.ListenerAddress(b.l)).Bool("inherited", b.inherited).Int("tokens", len(b.tokens)).Msg("serving")
	}
	var serveErr error
serving:
	for {
		select {
		case <-c.Context.Done():
			s.log.Info().Dur("grace", c.Duration("shutdown-grace")).Msg("stopping: signal received; draining running calls")
			break serving
		case serveErr = <-errc:
			s.log.Error().Err(serveErr).Msg("stopping: a listener failed")
			break serving
		case <-hup:
			reload()
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), c.Duration("shutdown-grace"))
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		s.log.Warn().Err(err).Msg("shutdown cancelled running calls")
	}
	s.log.Info().Msg("stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return sandbox.Errorf(sandbox.ErrUnavailable, "serve: %v", serveErr)
	}
	return nil
}

// reload is SIGHUP: it reopens the audit log at its path (after a
// rotation records go to a new file whose chain starts again; the old
// file's head is logged to link them) and reloads the policies from the
// built-ins and --policy-file. Whatever fails keeps the old one in use and
// is logged at error; the service keeps serving.
func (s *settings) reload(srv *api.Server, audit *api.AuditLog, auditPath string, policyFiles func() ([]string, error)) {
	if audit != nil {
		if head, err := audit.Reopen(); err != nil {
			s.log.Error().Err(err).Str("path", auditPath).Msg("SIGHUP: reopening the audit log failed; still writing the old file")
		} else {
			s.log.Info().Str("path", auditPath).Str("previousHead", head).Msg("SIGHUP: audit log reopened")
		}
	}
	files, err := policyFiles()
	var policies map[string]sandbox.Policy
	if err == nil {
		policies, err = s.servePolicies(files)
	}
	if err == nil {
		err = srv.SetPolicies(policies)
	}
	if err != nil {
		s.log.Error().Err(err).Msg("SIGHUP: reloading the policies failed; the old ones stay in use")
		return
	}
	s.log.Info().Int("policies", len(policies)).Msg("SIGHUP: policies reloaded")
}

// queueFlag maps --max-queue and --max-jobs-per-session to their
// api.Options fields (whose 0 means the default): 0 on the command line
// means none (no queue, no limit).
func queueFlag(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// ttlFlag maps --job-ttl to api.Options.JobTTL: 0 on the command line
// keeps ended jobs until removed.
func ttlFlag(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// checkDeployment returns the paths calls may never reach
// (settings.protectedPaths, the audit log and its checkpoint, every socket) and refuses
// to serve when one of them lies inside a --workspace-roots directory, or
// a root inside one of them: a call could then write what the service
// trusts.
func checkDeployment(s *settings, listens []string, auditFiles map[string]string) (map[string]string, error) {
	protected := s.protectedPaths()
	maps.Copy(protected, auditFiles)
	n := 0
	for _, addr := range listens {
		if scheme, target, err := types.ParseListen(addr); err == nil && scheme == types.SchemeUnix {
			n++
			name := "service socket"
			if n > 1 {
				name = fmt.Sprintf("service socket %d", n)
			}
			protected[name] = target
		}
	}
	for _, root := range s.workspaceRoots {
		if err := hostpath.CheckDeployment(root, protected); err != nil {
			return nil, usageError("--workspace-roots %s: %v", root, err)
		}
	}
	return protected, nil
}

// servePolicyFiles are the --policy-file files followed by the policy
// files in --policy-dir (dir, "" for none), in name order: every entry
// named *.yaml, *.yml or *.json. The directory is resolved without
// following links; each file gets the checks of every policy file the
// operator names (operatorPolicy).
func servePolicyFiles(files []string, dir string) ([]string, error) {
	if dir == "" {
		return files, nil
	}
	abs, err := absFlag("policy-dir", dir)
	if err != nil {
		return nil, err
	}
	if abs, err = hostpath.ResolveDir("--policy-dir", abs); err != nil {
		return nil, usageError("%v", err)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, usageError("--policy-dir: %v", err)
	}
	out := slices.Clone(files)
	for _, e := range entries {
		if isPolicyFile(e.Name()) {
			out = append(out, filepath.Join(abs, e.Name()))
		}
	}
	return out, nil
}

// servePolicies are the built-in profiles plus the --policy-file ones, by
// name; a file may not shadow a built-in or another file. Each file must
// be operator-owned and outside the workspace roots (operatorPolicy).
func (s *settings) servePolicies(files []string) (map[string]sandbox.Policy, error) {
	out := map[string]sandbox.Policy{}
	for _, name := range policy.Builtins() {
		p, _ := policy.Builtin(name)
		np, err := policy.Normalize(p)
		if err != nil {
			return nil, err
		}
		out[name] = np
	}
	for _, f := range files {
		p, err := s.operatorPolicy("policy-file", f, false)
		if err != nil {
			return nil, err
		}
		if _, dup := out[p.Name]; dup {
			return nil, usageError("--policy-file %s: policy name %q is already taken", f, p.Name)
		}
		if out[p.Name], err = policy.Normalize(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// executorRouter is the service's sandbox.Executor: it runs each call on
// the backend and runtime its policy names, creating one executor per
// pair on first use and never substituting another (fail closed).
type executorRouter struct {
	s      *settings
	mu     sync.Mutex
	execs  map[string]sandbox.Executor
	closes []func()
}

var _ sandbox.Executor = (*executorRouter)(nil)

func (r *executorRouter) get(p sandbox.Policy) (sandbox.Executor, error) {
	key := string(p.Backend) + "/" + string(p.Runtime)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ex, ok := r.execs[key]; ok {
		return ex, nil
	}
	ex, closeEx, err := r.s.newExecutor(p)
	if err != nil {
		return nil, err
	}
	if r.execs == nil {
		r.execs = map[string]sandbox.Executor{}
	}
	r.execs[key] = ex
	r.closes = append(r.closes, closeEx)
	return ex, nil
}

// Run runs req on its policy's backend.
func (r *executorRouter) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	ex, err := r.get(req.Policy)
	if err != nil {
		return nil, err
	}
	return ex.Run(ctx, req)
}

// poolSize is the sum of the sizes of the executors' warm pools.
func (r *executorRouter) poolSize() pool.Size {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum pool.Size
	for _, ex := range r.execs {
		if p, ok := ex.(interface{ PoolSize() pool.Size }); ok {
			sz := p.PoolSize()
			sum.Ready += sz.Ready
			sum.Preparing += sz.Preparing
			sum.Keys += sz.Keys
		}
	}
	return sum
}

// reapAll creates the executor of every policy's backend that reaps and
// removes what dead instances left; it returns how many objects it
// removed. A backend that is unavailable here (a daemon that does not
// answer, an OCI runtime that is not installed) is a warning: its
// policies' calls fail with "unavailable". Any other error, or no usable
// backend at all, is an error.
func (r *executorRouter) reapAll(ctx context.Context, policies map[string]sandbox.Policy) (int, error) {
	n, opened := 0, 0
	var unusable error
	for _, p := range policies {
		d, known := backends.Lookup(p.Backend)
		if known && !d.Reaps {
			opened++
			continue
		}
		ex, err := r.get(p)
		if err != nil {
			// A backend that is missing here (a daemon down, a runtime not
			// installed: serve in a Kubernetes pod runs no runc) leaves its
			// policies' calls failing as unavailable; anything else, or no
			// usable backend at all, stops the service.
			missing := errors.Is(err, sandbox.ErrUnavailable) || d.Needs.Daemon != nil
			if !known || !missing {
				return n, err
			}
			unusable = err
			r.s.log.Warn().Err(err).Str("backend", string(p.Backend)).Str("policy", p.Name).Msg("backend not usable at start-up; its calls fail until it is")
			continue
		}
		opened++
		rep, err := reapExecutor(ctx, ex)
		n += rep.Removed()
		if err != nil {
			r.s.log.Warn().Err(err).Str("backend", string(p.Backend)).Str("runtime", string(p.Runtime)).Msg("reaping leftovers of earlier instances failed")
		}
	}
	if opened == 0 && unusable != nil {
		return n, fmt.Errorf("no backend of the service's policies is usable: %w", unusable)
	}
	return n, nil
}

func (r *executorRouter) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.closes {
		c()
	}
	r.closes, r.execs = nil, nil
}

// execRemote is `exec --server`: it sends the call to a running service
// and reports it exactly as a local exec does. The service builds the
// DSH_* snapshot; the policy must be one it knows by name.
func (s *settings) execRemote(c *cli.Context, addr string, req *sandbox.Request) error {
	for _, f := range []string{"backend", "runtime", "image"} {
		if c.IsSet(f) {
			return usageError("--%s: not available with --server; name a policy the service knows", f)
		}
	}
	var token string
	if f := c.String("token-file"); f != "" {
		var err error
		if token, err = api.ReadToken(f); err != nil {
			return usageError("--token-file: %v", err)
		}
	}
	cl, err := client.New(addr, client.Options{Token: token, RetryFor: client.DefaultRetryFor})
	if err != nil {
		return usageError("--server: %v", err)
	}
	rr, err := s.runRequest(c, req)
	if err != nil {
		return err
	}
	// Any stdin streams to the service (a multipart stdin part), so its
	// size is not bound by the JSON body's.
	stdout, stderr := c.App.Writer, c.App.ErrWriter
	if c.Bool("json") {
		stdout, stderr = nil, nil
	}
	var resp *types.RunResponse
	switch stdin := req.StdinSource(); {
	case stdin != nil:
		resp, err = cl.StreamStdin(c.Context, rr, stdin, stdout, stderr)
	case c.Bool("json"):
		resp, err = cl.Run(c.Context, rr)
	default:
		resp, err = cl.Stream(c.Context, rr, stdout, stderr)
	}
	if err != nil {
		return remoteError(addr, err)
	}
	res := resp.Result
	return finishExec(c, res, c.Bool("json"))
}

// remoteError says why the service at addr did not run the call when it
// refused or could not take it (exit 125, as the class is kept); other
// errors are returned as they are.
func remoteError(addr string, err error) error {
	var why string
	switch {
	case errors.Is(err, types.ErrUnauthorized):
		why = "the service refused the credentials (check --token-file)"
	case errors.Is(err, types.ErrForbidden):
		why = "the service refused this client"
	case errors.Is(err, types.ErrOverloaded):
		why = "the service is overloaded and stayed so while retrying"
	case errors.Is(err, sandbox.ErrUnavailable):
		why = "the service is unreachable or cannot run the call now"
	default:
		return err
	}
	return fmt.Errorf("--server %s: %s; nothing ran: %w", addr, why, err)
}
