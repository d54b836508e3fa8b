package driver

import (
	"cmp"
	"log/slog"
	"os"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Service is what every backend's executor takes from the service that
// runs it, whatever the backend: its state directory, logger, environment,
// kill grace and pattern detector. Each backend's Options embed it, as do
// backend.Config (what a program opens a backend with) and Profile (what
// the driver runs a backend's calls with). It is a plain value, safe to
// copy.
type Service struct {
	// StateDir is an absolute directory owned by the service: spill files
	// of calls without a session directory go to StateDir/spill, and a
	// backend keeps its own state under it (its Options say where).
	// Executors, also of other backends and other processes, may share
	// it. Required.
	StateDir string
	// Logger receives debug events per call and errors of teardown; nil
	// logs nothing. Env values are never logged.
	Logger *slog.Logger
	// Getenv reads the service's environment for Policy.EnvInherit and
	// Policy.RedactEnv, at call time; nil means os.LookupEnv.
	Getenv func(string) (string, bool)
	// KillGrace is how long a timed-out or cancelled call has between
	// SIGTERM and SIGKILL; 0 means sandbox.DefaultKillGrace.
	KillGrace time.Duration
	// Detector finds secrets by their shape in the output of calls whose
	// policy sets RedactDetectors (redact.Options.Detector); the program
	// builds it (cmd/dsh-sandbox: gitleaks's rules). Nil means none: such
	// a policy's calls are then refused before anything runs, with an
	// error wrapping sandbox.ErrUnavailable that names redact.detectors
	// (secrets.CheckDetector). It must be safe for concurrent use.
	Detector redact.Detector
}

// WithDefaults returns s with the default of each field whose zero value
// means one (Getenv os.LookupEnv; KillGrace sandbox.DefaultKillGrace, also
// for a negative one; Logger one that discards), its Logger carrying the
// backend's fields attrs ("backend", name, "instance", id). A backend's
// New applies it once to its Options and its Profile returns the result.
func (s Service) WithDefaults(attrs ...any) Service {
	if s.Getenv == nil {
		s.Getenv = os.LookupEnv
	}
	if s.KillGrace <= 0 {
		s.KillGrace = sandbox.DefaultKillGrace
	}
	s.Logger = cmp.Or(s.Logger, slog.New(slog.DiscardHandler)).With(attrs...)
	return s
}
