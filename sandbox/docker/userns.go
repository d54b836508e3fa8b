package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// The Docker engine gives containers a user namespace only daemon-wide
// (dockerd --userns-remap): every container's ids 0 … n-1 are the host
// ids of the remap user's /etc/subuid and /etc/subgid ranges, laid end
// to end in file order. An engine that remaps runs every call in that
// namespace, with every bind staged as an id-mapped mount with the same
// map (on disk uid k is container uid k: files the call creates belong
// on the host to the uid it runs as, the workspace owner, root
// included), except a policy that says user: host-root, which runs with
// the host's ids (HostConfig.UsernsMode "host"). An engine that does not
// remap runs calls with the host's ids, so a call as uid 0 would be host
// root: it is refused (docs/identity.md).

// remap is the user namespace remapping of an engine.
type remap struct {
	// UIDs and GIDs are the engine's maps; both nil when it does not
	// remap.
	UIDs, GIDs []specs.LinuxIDMapping
	// User is the remap user, as /etc/subuid names it.
	User string
}

// enabled reports whether the engine remaps.
func (r remap) enabled() bool { return len(r.UIDs) > 0 }

// String describes r for doctor and errors.
func (r remap) String() string {
	if !r.enabled() {
		return "no user namespace remapping (userns-remap is off)"
	}
	return fmt.Sprintf("userns-remap user %s: uids %s, gids %s", r.User, mapString(r.UIDs), mapString(r.GIDs))
}

func mapString(m []specs.LinuxIDMapping) string {
	parts := make([]string, len(m))
	for i, e := range m {
		parts[i] = fmt.Sprintf("%d-%d→%d", e.ContainerID, e.ContainerID+e.Size-1, e.HostID)
	}
	return strings.Join(parts, ",")
}

// subIDFiles are where the engine reads the remap user's ranges.
var subIDFiles = [2]string{"/etc/subuid", "/etc/subgid"}

// detectRemap reads the engine's remapping from its info (security
// option name=userns; the data root <root>/<uid>.<gid> names the host
// ids of container root) and the host's /etc/subuid and /etc/subgid.
// An engine that remaps with a map this cannot tell is an error: the
// binds would be mapped wrong.
func detectRemap(securityOptions []string, rootDir string) (remap, error) {
	opts, err := system.DecodeSecurityOptions(securityOptions)
	if err != nil {
		return remap{}, fmt.Errorf("the engine's security options %q: %w", securityOptions, err)
	}
	if !slices.ContainsFunc(opts, func(o system.SecurityOpt) bool { return o.Name == "userns" }) {
		return remap{}, nil
	}
	rootUID, rootGID, err := remapRoot(rootDir)
	if err != nil {
		return remap{}, err
	}
	subuid, err := os.ReadFile(subIDFiles[0])
	if err != nil {
		return remap{}, fmt.Errorf("the engine remaps user namespaces: %w", err)
	}
	subgid, err := os.ReadFile(subIDFiles[1])
	if err != nil {
		return remap{}, fmt.Errorf("the engine remaps user namespaces: %w", err)
	}
	return remapFromSubIDs(rootUID, rootGID, subuid, subgid, userAliases)
}

// remapRoot parses the host uid and gid of the remapped root from the
// engine's data root, which a remapping engine names <root>/<uid>.<gid>.
func remapRoot(rootDir string) (uid, gid uint32, err error) {
	base := filepath.Base(rootDir)
	u, g, ok := strings.Cut(base, ".")
	uid64, uerr := strconv.ParseUint(u, 10, 32)
	gid64, gerr := strconv.ParseUint(g, 10, 32)
	if !ok || uerr != nil || gerr != nil {
		return 0, 0, fmt.Errorf("the engine remaps user namespaces, but its data root %q does not end in <uid>.<gid>", rootDir)
	}
	if uid64 == 0 || gid64 == 0 {
		return 0, 0, fmt.Errorf("the engine's data root %q says container root is host id 0", rootDir)
	}
	return uint32(uid64), uint32(gid64), nil
}

// subID is one line of /etc/subuid or /etc/subgid.
type subID struct {
	key          string // a user name or a numeric uid
	start, count uint32
}

// parseSubIDs parses a /etc/subuid or /etc/subgid file: lines
// "name:start:count"; empty lines and comments are skipped, anything
// else malformed is an error.
func parseSubIDs(name string, data []byte) ([]subID, error) {
	var out []subID
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) != 3 || f[0] == "" {
			return nil, fmt.Errorf("%s line %d: %q is not name:start:count", name, n, line)
		}
		start, serr := strconv.ParseUint(f[1], 10, 32)
		count, cerr := strconv.ParseUint(f[2], 10, 32)
		if serr != nil || cerr != nil || count == 0 || start+count-1 > 1<<32-1 {
			return nil, fmt.Errorf("%s line %d: %q is not name:start:count", name, n, line)
		}
		out = append(out, subID{key: f[0], start: uint32(start), count: uint32(count)})
	}
	return out, sc.Err()
}

// userAliases returns the spellings of the user key (a name or a numeric
// uid) that /etc/subuid may use: the key and, when the user database
// knows it, its uid or name.
func userAliases(key string) []string {
	if _, err := strconv.ParseUint(key, 10, 32); err == nil {
		if u, err := user.LookupId(key); err == nil {
			return []string{key, u.Username}
		}
		return []string{key}
	}
	if u, err := user.Lookup(key); err == nil {
		return []string{key, u.Uid}
	}
	return []string{key}
}

// remapFromSubIDs finds the remap user, the one whose first /etc/subuid
// range starts at rootUID, and returns the engine's maps as the engine
// builds them: that user's ranges (lines naming it or its uid) in file
// order, laid end to end from container id 0; the same for /etc/subgid,
// whose first range must start at rootGID. aliases gives a user key's
// spellings. No user, two users, or a map reaching host id 0 are errors.
func remapFromSubIDs(rootUID, rootGID uint32, subuid, subgid []byte, aliases func(string) []string) (remap, error) {
	uids, err := parseSubIDs(subIDFiles[0], subuid)
	if err != nil {
		return remap{}, err
	}
	gids, err := parseSubIDs(subIDFiles[1], subgid)
	if err != nil {
		return remap{}, err
	}
	var found *remap
	var foundNames []string
	for _, cand := range uids {
		if cand.start != rootUID || slices.Contains(foundNames, cand.key) {
			continue
		}
		names := aliases(cand.key)
		um := idMap(uids, names)
		if um[0].HostID != rootUID {
			continue // not that user's first range
		}
		if found != nil {
			return remap{}, fmt.Errorf("%s: both %s and %s have their first range at %d, the engine's root uid", subIDFiles[0], found.User, cand.key, rootUID)
		}
		gm := idMap(gids, names)
		if len(gm) == 0 || gm[0].HostID != rootGID {
			return remap{}, fmt.Errorf("%s: the first range of %s does not start at %d, the engine's root gid", subIDFiles[1], cand.key, rootGID)
		}
		found, foundNames = &remap{UIDs: um, GIDs: gm, User: cand.key}, names
	}
	if found == nil {
		return remap{}, fmt.Errorf("%s: no user's first range starts at %d, the engine's root uid", subIDFiles[0], rootUID)
	}
	for _, m := range [][]specs.LinuxIDMapping{found.UIDs, found.GIDs} {
		if _, ok := hostZero(m); ok {
			return remap{}, fmt.Errorf("the ranges of %s reach host id 0", found.User)
		}
	}
	return *found, nil
}

// idMap lays the ranges of the keys names end to end, in file order.
func idMap(ids []subID, names []string) []specs.LinuxIDMapping {
	var m []specs.LinuxIDMapping
	var next uint32
	for _, s := range ids {
		if !slices.Contains(names, s.key) {
			continue
		}
		m = append(m, specs.LinuxIDMapping{ContainerID: next, HostID: s.start, Size: s.count})
		next += s.count
	}
	return m
}

// hostZero returns the container id m maps to host id 0, if any.
func hostZero(m []specs.LinuxIDMapping) (uint32, bool) {
	for _, e := range m {
		if e.HostID == 0 {
			return e.ContainerID, true
		}
	}
	return 0, false
}

// callUser is how one call's ids meet the host.
type callUser struct {
	// hostIDs: the call runs with the host's ids on an engine that
	// remaps (UsernsMode "host"): the policy said user: host-root, or
	// the runtime is runsc.
	hostIDs bool
	// idmapped: the call runs in the engine's user namespace and its
	// binds are staged as id-mapped mounts with the engine's map.
	idmapped bool
	// seccomp is the profile, as JSON: policy.DefaultSeccompJSON, or for
	// a call as container uid 0 whose files land on disk as uid 0 (an
	// id-mapped call) the profile that also refuses setuid and setgid
	// modes (policy.WithoutSetidModes).
	seccomp string
}

// runtimeRunsc is gVisor's runtime name. Its gofer opens the binds from
// inside the container's user namespace, so on an engine that remaps it
// could reach no bind below a directory others cannot search; a runsc
// call gets the host's ids instead, like on the oci backend.
const runtimeRunsc = sandbox.RuntimeRunsc

// forCall decides how a call of policy p running as container uid:gid
// meets the host's ids on an engine with remapping r. A call that would
// run as host uid 0 (uid 0 on an engine that does not remap, or under
// runsc) is refused (sandbox.ErrUnavailable) unless the policy says
// user: host-root. ids outside the engine's map are refused
// (sandbox.ErrInvalid).
func (r remap) forCall(p sandbox.Policy, uid, gid uint32) (callUser, error) {
	plain, err := policy.DefaultSeccompJSON()
	if err != nil {
		return callUser{}, err
	}
	if policy.HostRoot(p) || !r.enabled() || p.Runtime == runtimeRunsc {
		if uid == 0 && !policy.HostRoot(p) {
			why := "the engine does not remap user namespaces; start the engine with --userns-remap (e.g. default; scripts/daemons.sh does)"
			if r.enabled() {
				why = "runtime runsc gets no user namespace from the engine (gVisor's gofer would have to reach every bind from inside it)"
			}
			return callUser{}, sandbox.Errorf(sandbox.ErrUnavailable, "docker: user %d:%d: the call would run as host uid 0: %s, or say user: %s in the policy to run it as host root on purpose", uid, gid, why, policy.UserHostRoot)
		}
		return callUser{hostIDs: r.enabled(), seccomp: plain}, nil
	}
	if _, ok := policy.HostID(r.UIDs, uid); !ok {
		return callUser{}, sandbox.Errorf(sandbox.ErrInvalid, "docker: user: uid %d is outside the engine's user namespace map (%s)", uid, mapString(r.UIDs))
	}
	if _, ok := policy.HostID(r.GIDs, gid); !ok {
		return callUser{}, sandbox.Errorf(sandbox.ErrInvalid, "docker: user: gid %d is outside the engine's user namespace map (%s)", gid, mapString(r.GIDs))
	}
	c := callUser{idmapped: true, seccomp: plain}
	if uid == 0 {
		if c.seccomp, err = noSetidSeccompJSON(); err != nil {
			return callUser{}, err
		}
	}
	return c, nil
}

// noSetidSeccompJSON is the default profile narrowed by
// policy.WithoutSetidModes, as JSON for HostConfig.SecurityOpt (the
// engine's profile format has the runtime-spec's field names and
// operators). Computed once.
var noSetidSeccompJSON = sync.OnceValues(func() (string, error) {
	s := &specs.Spec{}
	for _, o := range []policy.SpecOpt{policy.WithDefaultSeccomp(), policy.WithoutSetidModes()} {
		if err := o(s); err != nil {
			return "", sandbox.Errorf(sandbox.ErrInternal, "docker: seccomp profile: %w", err)
		}
	}
	b, err := json.Marshal(s.Linux.Seccomp)
	if err != nil {
		return "", sandbox.Errorf(sandbox.ErrInternal, "docker: seccomp profile: %w", err)
	}
	return string(b), nil
})

// usernsMode is HostConfig.UsernsMode for the call: "host" for user:
// host-root or runsc on an engine that remaps, else the engine's
// default.
func usernsMode(u callUser) container.UsernsMode {
	if u.hostIDs {
		return "host"
	}
	return ""
}

// engineRemap asks the engine for its info and detects its remapping
// (detectRemap); errors wrap sandbox.ErrUnavailable.
func engineRemap(ctx context.Context, cli *client.Client) (remap, error) {
	info, err := cli.Info(ctx)
	if err != nil {
		return remap{}, unavailable(err, "engine info")
	}
	r, err := detectRemap(info.SecurityOptions, info.DockerRootDir)
	if err != nil {
		return remap{}, sandbox.Errorf(sandbox.ErrUnavailable, "docker: engine at %s: %v", cli.DaemonHost(), err)
	}
	return r, nil
}

// usernsFile returns a user namespace with the engine's maps for the
// id-mapped staging mounts, made on first use and kept until Close.
func (e *Executor) usernsFile() (*os.File, error) {
	e.nsMu.Lock()
	defer e.nsMu.Unlock()
	if e.userns == nil {
		ns, err := idmap.NewUserNamespace(e.remap.UIDs, e.remap.GIDs)
		if err != nil {
			return nil, err
		}
		e.userns = ns
	}
	return e.userns, nil
}
