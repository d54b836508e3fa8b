// Package backend describes sandbox backends to the code that picks one:
// each backend package exports a Descriptor (its register.go) saying what
// it needs, how to open an executor and which optional capabilities it
// has (reaping, a doctor, an image store, a bench baseline), and a
// Registry holds the descriptors a program links. cmd/dsh-sandbox keeps
// the one list of built-in backends (builtins.go, a line per backend) and
// looks backends up by name for exec, serve, mcp, hooks, reap, doctor,
// bench and images.
//
// It imports only sandbox, images, driver (for Service) and pool (for its
// Options). Backend packages import it for the Descriptor type; only cmd
// and integration import the backends.
package backend

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// Config is what a backend may need to open an executor, run its doctor
// or its bench baseline. The caller fills what the Descriptor's Needs
// ask for; a backend reads nothing else.
type Config struct {
	// Service is what every backend takes from the service: the state
	// directory (instance locks, bundles, staging mounts; required by
	// every backend), the logger, the environment reader and the kill
	// grace.
	driver.Service
	// Images is the local image store under the data directory; set only
	// for a backend whose Needs.Images is true, nil otherwise.
	Images *images.Store
	// Options are the backend's own settings that the program chooses
	// (the docker backend's engine address, containerd's address and
	// namespace): a value of the backend package's Options type, whose
	// Service, Images and Pool the backend fills from this Config. Nil
	// means the backend's defaults; a value of another type is a
	// programming error, and the backend panics. The way containerd hands
	// each plugin its own configuration.
	Options any
	// Pool, when set, turns on the warm pool of a backend that has one
	// (oci with runc or crun); others ignore it. Nil means no pool.
	Pool *pool.Options
}

// OwnOptions returns cfg.Options, the backend's own settings, as its
// Options type O: the zero O when cfg.Options is nil. Another type is a
// programming error: OwnOptions panics.
func OwnOptions[O any](cfg Config) O {
	if cfg.Options == nil {
		var zero O
		return zero
	}
	o, ok := cfg.Options.(O)
	if !ok {
		panic(fmt.Sprintf("backend: Config.Options is a %T, want a %T", cfg.Options, o))
	}
	return o
}

// Needs says what a backend needs besides Config.StateDir.
type Needs struct {
	// Images means Open needs Config.Images, the local image store.
	Images bool
	// Daemon is the daemon the backend talks to; nil for a backend that
	// runs its containers itself.
	Daemon *Daemon
}

// Daemon names a backend's daemon, so that a doctor can say how to get it.
type Daemon struct {
	// Binary is the daemon's program, e.g. "dockerd".
	Binary string
	// Package is the Debian package that installs it, e.g. "docker.io".
	Package string
}

// ImageSource says where the images a backend runs live.
type ImageSource int

const (
	// ImagesNone: the backend runs on the host's own file system only.
	ImagesNone ImageSource = iota
	// ImagesLocal: the local image store (Config.Images).
	ImagesLocal
	// ImagesExecutor: the backend's daemon; its executors implement
	// ImageStore.
	ImagesExecutor
)

// Bench is a backend's baseline for `dsh-sandbox bench`: the same call
// made as directly as the backend's own tools allow.
type Bench struct {
	// Baseline names the baseline series, e.g. "docker run --rm".
	Baseline string
	// Run makes and times one baseline call of true on image ("" for the
	// host's file system, when Image is false).
	Run func(ctx context.Context, cfg Config, image string) (time.Duration, error)
	// Image means the backend's calls and its baseline run on the bench
	// image, which bench first imports through the executor's
	// ImageStore; otherwise both run on the host's file system.
	Image bool
	// User, when set, is the policy user of the backend's bench calls,
	// for a backend that refuses user auto on bench's workspace (owned by
	// whoever runs bench, root included).
	User string
}

// Descriptor describes one backend. Name and Open are required; a nil
// capability is one the backend does not have.
type Descriptor struct {
	// Name is how policies and --backend name the backend.
	Name sandbox.Backend
	// Runtimes are the OCI runtimes the backend runs, the default first;
	// nil for a backend without a choice of runtime (reap and doctor then
	// look at it once).
	Runtimes []sandbox.Runtime
	// Needs says what Open, Doctor and Bench read of Config.
	Needs Needs
	// Open builds an executor for runtime ("" for a backend without
	// Runtimes, else one of them). It never substitutes another backend
	// or runtime (fail closed). The executor may implement io.Closer,
	// Reaper, DeadReaper and ImageStore.
	Open func(ctx context.Context, cfg Config, runtime sandbox.Runtime) (sandbox.Executor, error)
	// Reaps means the executors Open returns implement Reaper: `reap`
	// looks at this backend and exec, mcp and serve reap it at start.
	Reaps bool
	// Images says where the backend's images live (`images` commands).
	Images ImageSource
	// Explicit means only a policy file may name the backend, never
	// --backend: it does not confine calls (local).
	Explicit bool
	// Doctor checks whether the backend (with runtime, as for Open) is
	// usable here; it leaves nothing behind. nil: no doctor.
	Doctor func(ctx context.Context, cfg Config, runtime sandbox.Runtime) []doctor.Check
	// Bench is the backend's bench baseline; nil: not benchmarked.
	Bench *Bench
}

// Reaper is an executor that removes what dead instances left behind.
type Reaper interface {
	Reap(ctx context.Context) (reap.Report, error)
}

// DeadReaper is a Reaper that can tell cheaply whether there may be
// anything to reap: ReapDead is Reap when there is, and otherwise
// returns an empty report without asking the runtime.
type DeadReaper interface {
	ReapDead(ctx context.Context) (reap.Report, error)
}

// ImageStore is the executor of a backend whose images live in its
// daemon (ImagesExecutor).
type ImageStore interface {
	// ImportRootfs stores the root-filesystem tarball r as image name
	// with the image environment env.
	ImportRootfs(ctx context.Context, r io.Reader, name string, env []string) error
	// Images lists the images dsh-sandbox imported.
	Images(ctx context.Context) ([]images.Image, error)
	// RemoveImage removes an image dsh-sandbox imported and returns its
	// canonical name.
	RemoveImage(ctx context.Context, name string) (string, error)
}

// Puller is an ImageStore whose daemon pulls images from registries
// itself (docker, containerd). Both methods take a reference in any
// spelling images.CanonicalReference takes.
type Puller interface {
	// PullImage checks ref with images/registry.Resolve (digest, signature under
	// o.Keys, size cap) and has the daemon pull exactly the resolved
	// digest, with o.Registries' credentials of that registry alone; it
	// returns the image (Name the canonical reference, Digest, Source,
	// Signers). Errors wrap images.ErrVerify, ErrNotFound or ErrInvalid
	// as images/registry.Pull's do, or a sandbox error class.
	PullImage(ctx context.Context, ref string, o images.PullOptions) (*images.Image, error)
	// PulledImage returns the image ref names in the daemon: a pulled one
	// (Source set), else an imported one; images.ErrNotFound when absent.
	PulledImage(ctx context.Context, ref string) (*images.Image, error)
}

// Opened is what an Open function returns for New's (ex, err): ex as a
// sandbox.Executor, or a nil interface with err, so that a nil *Executor
// never hides in a non-nil interface.
func Opened[E sandbox.Executor](ex E, err error) (sandbox.Executor, error) {
	if err != nil {
		return nil, err
	}
	return ex, nil
}

// Target is one backend and runtime: what reap, doctor and bench look at
// one by one.
type Target struct {
	*Descriptor
	// Runtime is one of Descriptor.Runtimes, or "" when it has none.
	Runtime sandbox.Runtime
}

// Label names the target for people and JSON: "oci/runc", "docker".
func (t Target) Label() string {
	if t.Runtime == "" {
		return string(t.Name)
	}
	return string(t.Name) + "/" + string(t.Runtime)
}

// Registry holds the backends a program links, in the order they were
// registered (the default backend first). The zero value is empty and
// ready to use. A Registry is not safe for concurrent Register calls;
// register at start-up, then only look up.
type Registry struct {
	list []*Descriptor
}

// Register adds d. A descriptor without a name or Open, or whose name is
// taken, is a programming error: Register panics.
func (r *Registry) Register(d Descriptor) {
	if d.Name == "" || d.Open == nil {
		panic(fmt.Sprintf("backend: descriptor %q needs a Name and Open", d.Name))
	}
	if _, ok := r.Lookup(d.Name); ok {
		panic(fmt.Sprintf("backend: %q is registered twice", d.Name))
	}
	r.list = append(r.list, &d)
}

// Unregister removes the backend name, if registered (for tests that
// register a backend of their own).
func (r *Registry) Unregister(name sandbox.Backend) {
	r.list = slices.DeleteFunc(r.list, func(d *Descriptor) bool { return d.Name == name })
}

// Lookup returns the backend name.
func (r *Registry) Lookup(name sandbox.Backend) (*Descriptor, bool) {
	for _, d := range r.list {
		if d.Name == name {
			return d, true
		}
	}
	return nil, false
}

// All returns every backend, in registration order.
func (r *Registry) All() []*Descriptor { return slices.Clone(r.list) }

// Names returns the names of the backends for which keep is true (nil
// keeps all), in registration order.
func (r *Registry) Names(keep func(*Descriptor) bool) []sandbox.Backend {
	var out []sandbox.Backend
	for _, d := range r.list {
		if keep == nil || keep(d) {
			out = append(out, d.Name)
		}
	}
	return out
}

// Runtimes returns every backend's runtimes, each once, in registration
// order.
func (r *Registry) Runtimes() []sandbox.Runtime {
	var out []sandbox.Runtime
	for _, d := range r.list {
		for _, rt := range d.Runtimes {
			if !slices.Contains(out, rt) {
				out = append(out, rt)
			}
		}
	}
	return out
}

// Targets returns a Target for every runtime of every backend for which
// keep is true (nil keeps all), in registration order.
func (r *Registry) Targets(keep func(*Descriptor) bool) []Target {
	var out []Target
	for _, d := range r.list {
		if keep != nil && !keep(d) {
			continue
		}
		if len(d.Runtimes) == 0 {
			out = append(out, Target{Descriptor: d})
			continue
		}
		for _, rt := range d.Runtimes {
			out = append(out, Target{Descriptor: d, Runtime: rt})
		}
	}
	return out
}
