package api

import (
	"maps"
	"path/filepath"
	"slices"

	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
)

// The harness trust boundary (DESIGN §3.12): a harness such as dsh sends
// its own DSH_* snapshot of the call (RunRequest.DSHEnv). The service
// never takes a mount or a built-in value from it; it compares.

// harnessEnv checks a harness's DSH_* snapshot (dshEnv, already
// well-formed: checkDSHEnv) against the service's own (own, collected
// from the service's registry for the same header) and returns the
// snapshot the call gets, sorted KEY=VALUE.
//
//   - Every key the service's registry declares (the built-ins DSH_HOME,
//     DSH_SHELL, DSH_SESSION_ID, DSH_SESSION_JSONL and any service-side
//     contributor's) comes from own. When dshEnv is not nil, such a key
//     must be present in it exactly when own has it, with the same value;
//     otherwise the request is refused with 403 naming "dshEnv.KEY". A
//     differing value is refused, never silently replaced: it means the
//     harness and the service disagree on the session, the dsh home or
//     the transcript's location (sessions root, compression,
//     persistence).
//   - Any other key is the harness's own registry's. It is accepted only
//     from a harness client (Client.Harness), else 403 naming
//     "dshEnv.KEY", and is added to own, so that the whole snapshot is
//     applied last (DESIGN §3.6).
//
// Messages name keys, never values.
func (s *Server) harnessEnv(cl Client, dshEnv map[string]string, own overlay.Snapshot) ([]string, error) {
	if dshEnv == nil {
		return own.Environ(), nil
	}
	declared := map[string]bool{}
	for _, d := range s.opts.Registry.List() {
		declared[d.Key] = true
	}
	for k := range own.All() {
		declared[k] = true // a snapshot key is always declared; be sure
	}
	for _, k := range slices.Sorted(maps.Keys(declared)) {
		want, has := own.Get(k)
		got, sent := dshEnv[k]
		field := "dshEnv." + k
		switch {
		case sent && !has:
			return nil, forbiddenf(field, "the service's own snapshot of this call has no %s; it comes only from the service", k)
		case !sent && has:
			return nil, forbiddenf(field, "is missing, but the service's own snapshot of this call has %s (the harness and the service must agree on %s)", k, agreeOn(k))
		case sent && got != want:
			return nil, forbiddenf(field, "differs from the service's own value; %s comes only from the service (the harness and the service must agree on %s)", k, agreeOn(k))
		}
	}
	env := own.Environ()
	for _, k := range slices.Sorted(maps.Keys(dshEnv)) {
		if declared[k] {
			continue
		}
		if !cl.Harness {
			return nil, forbiddenf("dshEnv."+k, "only an authenticated harness client (a socket peer, or a token marked %q) may add DSH_* keys beyond the service's own; client %q is not one", HarnessWord, cl.Name)
		}
		env = append(env, k+"="+dshEnv[k])
	}
	slices.Sort(env)
	return env, nil
}

// agreeOn says which configuration a built-in key depends on.
func agreeOn(key string) string {
	switch key {
	case overlay.KeyHome:
		return "the dsh home"
	case overlay.KeySessionID:
		return "the session header"
	case overlay.KeySessionJSONL:
		return "the persistence, sessions root and compression"
	}
	return "the service's DSH_* contributors"
}

// checkTranscript refuses a located transcript whose session directory
// does not lie inside the service's sessions root (Options.SessionsRoot;
// no check when it is empty). field names what the client is to blame
// for: its dshEnv.DSH_SESSION_JSONL when it sent a snapshot, else its
// session.cwd.
func (s *Server) checkTranscript(field, path string) error {
	root := s.opts.SessionsRoot
	if root == "" {
		return nil
	}
	dir := filepath.Dir(filepath.Clean(path))
	if !filepath.IsAbs(path) || dir == root || !hostpath.Within(dir, root) {
		return forbiddenf(field, "the session's transcript directory lies outside the service's sessions root %s", root)
	}
	return nil
}
