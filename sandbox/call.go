package sandbox

import (
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
)

// Call is a validated Request resolved against its policy: everything a
// backend needs besides the Request itself. prepare.Call makes it; it is a
// plain value, safe to copy and to read concurrently.
type Call struct {
	// ID names the call: Request.CallID or a random "call-<hex>". It is
	// safe as a file name and a container id: 1–64 characters of
	// [A-Za-z0-9_.-], beginning with a letter or digit.
	ID string
	// Env is the child's complete environment, sorted (childenv.Build).
	Env []string
	// Timeout is the effective timeout, > 0.
	Timeout time.Duration
	// Workdir is the absolute, clean working directory inside the
	// container.
	Workdir string
	// TailBytes is how many bytes of each stream's tail to keep, > 0.
	TailBytes int
	// SpillMax caps each spill file, > 0.
	SpillMax int64
	// SpillDir is where spill files go: <TranscriptDir>/spill when the
	// session has a transcript directory, else "" and the backend uses
	// its own state directory. Files are <SpillDir>/<ID>.stdout|.stderr.
	SpillDir string
	// SpillInside is true when SpillDir is visible inside later calls of
	// the session (the transcript directory is mounted, Policy.Transcript
	// is "ro").
	SpillInside bool
	// SpillTotal caps the spill files of the spill directory together,
	// > 0; SpillRetention is how long they are kept, > 0. capture.ForCall
	// enforces both.
	SpillTotal     int64
	SpillRetention time.Duration

	// Workspace is the session cwd as Paths resolved it (clean,
	// no symbolic link in any component, not a system directory) when
	// the policy mounts the workspace; "" before Paths or when it
	// is not mounted.
	Workspace string
	// TranscriptDir is the session directory as Paths resolved
	// and created it; "" before Paths or without one.
	TranscriptDir string
	// SpillOwner is who owns the spill files of SpillDir: the harness
	// user (Session.Owner, or the running process). SpillReader, when
	// set, is the call's identity, which gets read access to them through
	// an ACL entry (the transcript is mounted and the call is not the
	// owner). Paths fills both; unset, spill files belong to the
	// running process alone.
	SpillOwner, SpillReader Owner
	// Redact holds the secrets capture.ForCall removes from the call's output
	// (secrets.Of); nil when there are none.
	Redact *redact.Set
}

// maxCallIDLen bounds Request.CallID; runtimes and cgroup paths take it
// as a name.
const maxCallIDLen = 64

// ValidCallID reports whether id is safe as a call id: 1–64 characters
// of [A-Za-z0-9_.-], beginning with a letter or digit, so that it can
// name a file, a container and a cgroup.
func ValidCallID(id string) bool {
	if id == "" || len(id) > maxCallIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}
