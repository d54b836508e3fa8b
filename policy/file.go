package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// MaxFileSize is the largest policy document Parse and Load accept, in
// bytes (1 MiB). Together with the YAML decoder's alias and depth limits it
// bounds the work a hostile document can cause.
const MaxFileSize = 1 << 20

// document is the policy file schema of DESIGN §3.9. Pointers tell an
// absent key (take the default) from a present one (validate it). The json
// tags are the only accepted spellings; matching is case-sensitive.
type document struct {
	Name       *string         `json:"name,omitempty"`
	Backend    *string         `json:"backend,omitempty"`
	Runtime    *string         `json:"runtime,omitempty"`
	Image      *string         `json:"image,omitempty"`
	Pull       *string         `json:"pull,omitempty"`
	Verify     *documentVerify `json:"verify,omitempty"`
	User       *string         `json:"user,omitempty"`
	Network    *networkValue   `json:"network,omitempty"`
	Workspace  *string         `json:"workspace,omitempty"`
	Transcript *string         `json:"transcript,omitempty"`
	Mounts     []documentMount `json:"mounts,omitempty"`
	MountRoots []documentRoot  `json:"mountRoots,omitempty"`
	Tmpfs      []documentTmpfs `json:"tmpfs,omitempty"`
	Limits     *documentLimits `json:"limits,omitempty"`
	Env        *documentEnv    `json:"env,omitempty"`
	Redact     *documentRedact `json:"redact,omitempty"`
	// TTY false refuses calls on a terminal (exec -t); absent or true
	// allows them.
	TTY *bool `json:"tty,omitempty"`
}

// documentVerify is the verify section: the public keys of which one
// must have signed the image.
type documentVerify struct {
	Keys []string `json:"keys"`
}

type documentMount struct {
	Source *string `json:"source,omitempty"`
	Target *string `json:"target,omitempty"`
	Mode   *string `json:"mode,omitempty"`
}

// documentRoot is a mountRoots entry: a host directory below which a
// call may ask for bind mounts, read-only only (mode ro) or also
// read-write (mode rw).
type documentRoot struct {
	Path *string `json:"path,omitempty"`
	Mode *string `json:"mode,omitempty"`
}

type documentTmpfs struct {
	Target *string    `json:"target,omitempty"`
	Size   *sizeValue `json:"size,omitempty"`
}

type documentLimits struct {
	Memory       *sizeValue `json:"memory,omitempty"`
	CPUs         *float64   `json:"cpus,omitempty"`
	Pids         *int64     `json:"pids,omitempty"`
	TimeoutMs    *int64     `json:"timeoutMs,omitempty"`
	MaxTimeoutMs *int64     `json:"maxTimeoutMs,omitempty"`
	// JobTimeoutMs is the deadline of a background job; absent or 0
	// means none.
	JobTimeoutMs   *int64     `json:"jobTimeoutMs,omitempty"`
	StdoutMaxBytes *sizeValue `json:"stdoutMaxBytes,omitempty"`
	SpillMaxBytes  *sizeValue `json:"spillMaxBytes,omitempty"`
	// SpillTotalBytes caps a session's spill files together (default
	// 256Mi); SpillRetention is how long they are kept, a Go duration
	// such as "24h" (the default).
	SpillTotalBytes *sizeValue `json:"spillTotalBytes,omitempty"`
	SpillRetention  *string    `json:"spillRetention,omitempty"`
	// WorkspaceBytes bounds what the workspace holds in all (project
	// quotas); no bound by default.
	WorkspaceBytes *sizeValue `json:"workspaceBytes,omitempty"`
}

type documentEnv struct {
	Inherit []string `json:"inherit"` // no omitempty: Format writes [] for "inherit nothing"
	// AllowSecrets names variables of Inherit passed even though their
	// name or value looks like a secret (childenv.Input.AllowSecrets).
	AllowSecrets []string               `json:"allowSecrets,omitempty"`
	Set          map[string]scalarValue `json:"set,omitempty"`
}

// documentRedact is the redact section: what the call's output must not
// show besides the values of the service's secret-looking variables
// (secrets.Of). Secret values are never written in a policy.
type documentRedact struct {
	// Env names variables of the service's environment to redact.
	Env []string `json:"env,omitempty"`
	// Files are absolute host paths whose contents are secrets, read at
	// call start.
	Files []string `json:"files,omitempty"`
	// Detectors also redacts the base64 forms of the secrets and what
	// the program's pattern detector finds (redact.Options.Detector).
	Detectors *bool `json:"detectors,omitempty"`
}

// sizeValue is a size as written: a JSON number or a string such as
// "256Mi". It is parsed during validation so that the error names the
// field.
type sizeValue string

func (v *sizeValue) UnmarshalJSON(b []byte) error {
	s, err := scalarText(b)
	*v = sizeValue(s)
	return err
}

func (v sizeValue) MarshalJSON() ([]byte, error) { return json.Marshal(string(v)) }

// scalarValue is an env.set value: a string, number or boolean, kept as
// its text ("1", "true"), since YAML authors write `DEBUG: 1`.
type scalarValue string

func (v *scalarValue) UnmarshalJSON(b []byte) error {
	s, err := scalarText(b)
	*v = scalarValue(s)
	return err
}

func (v scalarValue) MarshalJSON() ([]byte, error) { return json.Marshal(string(v)) }

// scalarText returns a JSON scalar as text: strings unquoted, numbers and
// booleans verbatim.
func scalarText(b []byte) (string, error) {
	if len(b) > 0 && b[0] == '"' {
		var s string
		err := json.Unmarshal(b, &s)
		return s, err
	}
	return string(b), nil
}

// networkValue is the network key: a mode as a string ("none",
// "loopback") or a mapping {mode, allow, deny} (documentNetwork).
type networkValue documentNetwork

// documentNetwork is the mapping form of the network key; mode
// "allowlist" is written only this way.
type documentNetwork struct {
	Mode        *string              `json:"mode,omitempty"`
	Allow       []string             `json:"allow,omitempty"`
	Deny        []string             `json:"deny,omitempty"`
	Credentials []documentCredential `json:"credentials,omitempty"`
}

// documentCredential is a network.credentials entry
// (sandbox.Credential): a secret bound to a host, its value named by
// source, never written in the policy.
type documentCredential struct {
	Name     *string                  `json:"name,omitempty"`
	Host     *string                  `json:"host,omitempty"`
	Port     *int64                   `json:"port,omitempty"`
	Header   *string                  `json:"header,omitempty"`
	Format   *string                  `json:"format,omitempty"`
	Variable *string                  `json:"variable,omitempty"`
	Value    *documentCredentialValue `json:"value,omitempty"`
	// UpstreamCA is an operator-owned PEM file of the CAs that verify
	// the host's certificate; absent means the host's trust store.
	UpstreamCA *string `json:"upstreamCA,omitempty"`
}

// documentCredentialValue says where a credential's value comes from:
// the service's environment (env) or an operator-owned file (file).
type documentCredentialValue struct {
	Env  *string `json:"env,omitempty"`
	File *string `json:"file,omitempty"`
}

func (v *networkValue) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		err := json.Unmarshal(b, &s)
		*v = networkValue{Mode: &s}
		return err
	}
	return json.Unmarshal(b, (*documentNetwork)(v))
}

// MarshalJSON writes the string form unless there are lists to write.
func (v networkValue) MarshalJSON() ([]byte, error) {
	if v.Allow == nil && v.Deny == nil && v.Credentials == nil && v.Mode != nil && sandbox.NetworkMode(*v.Mode) != sandbox.NetworkAllowlist {
		return json.Marshal(*v.Mode)
	}
	return json.Marshal(documentNetwork(v))
}

var (
	sizeType    = reflect.TypeFor[sizeValue]()
	scalarType  = reflect.TypeFor[scalarValue]()
	networkType = reflect.TypeFor[networkValue]()
)

// Parse reads a policy document, YAML or JSON, and returns the resolved
// policy: defaults (those of the workspace-write profile) filled in for
// absent keys, everything validated, normalized and digested. A document
// without a name is named "custom". Unknown keys, wrong types, duplicate
// keys, null values and documents over MaxFileSize are errors; every error
// wraps sandbox.ErrInvalid and names the field path, e.g.
// `limits.memroy` or `mounts[0].source`.
// Its backend must be one of those package sandbox names (oci, docker,
// containerd, local); LoadChecked takes a program's own list.
func Parse(data []byte) (sandbox.Policy, error) {
	return parse(data, "custom", "policy", defaultBackends)
}

// parse is Parse with the name a nameless document gets, the words that
// start every error message ("policy", "policy file x.yaml") and the
// backends it may name.
func parse(data []byte, defaultName, where string, backends []sandbox.Backend) (sandbox.Policy, error) {
	if len(data) > MaxFileSize {
		return sandbox.Policy{}, sandbox.Errorf(sandbox.ErrInvalid, "%s: document is %d bytes; the limit is %d", where, len(data), MaxFileSize)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return sandbox.Policy{}, sandbox.Errorf(sandbox.ErrInvalid, "%s: not valid YAML or JSON: %v", where, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return sandbox.Policy{}, sandbox.Errorf(sandbox.ErrInvalid, "%s: not valid YAML or JSON: %v", where, err)
	}
	if tree == nil {
		return sandbox.Policy{}, sandbox.Errorf(sandbox.ErrInvalid, "%s: document is empty; want a mapping such as `name: my-policy`", where)
	}
	var ps problems
	checkShape(tree, reflect.TypeFor[document](), "", &ps)
	if err := ps.err(where); err != nil {
		return sandbox.Policy{}, err
	}
	var doc document
	if err := json.Unmarshal(js, &doc); err != nil {
		// checkShape accepted the tree, so this is not the user's fault.
		return sandbox.Policy{}, sandbox.Errorf(sandbox.ErrInternal, "%s: decoding a checked document: %v", where, err)
	}
	return fromDocument(&doc, defaultName, where, backends)
}

// checkShape compares a decoded JSON tree with the schema type t and
// records, with the field path, every unknown key, null value and value of
// the wrong type. encoding/json matches keys case-insensitively and
// reports neither the path of an unknown key nor array indices; this walk
// does both.
func checkShape(v any, t reflect.Type, path string, ps *problems) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if v == nil {
		ps.add(path, "has no value (null); give a value or remove the key")
		return
	}
	switch t {
	case sizeType:
		switch v.(type) {
		case string, json.Number:
			return
		}
		ps.add(path, "is %s; want a size such as 256Mi or 64000", kindOf(v))
		return
	case scalarType:
		switch v.(type) {
		case string, json.Number, bool:
			return
		}
		ps.add(path, "is %s; want a string, number or boolean", kindOf(v))
		return
	case networkType:
		if _, ok := v.(string); !ok {
			checkShape(v, reflect.TypeFor[documentNetwork](), path, ps)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		checkStructShape(v, t, path, ps)
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			ps.add(path, "is %s; want a mapping", kindOf(v))
			return
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			checkShape(m[k], t.Elem(), join(path, k), ps)
		}
	case reflect.Slice:
		a, ok := v.([]any)
		if !ok {
			ps.add(path, "is %s; want a list", kindOf(v))
			return
		}
		for i, e := range a {
			checkShape(e, t.Elem(), path+"["+strconv.Itoa(i)+"]", ps)
		}
	default:
		checkScalarShape(v, t, path, ps)
	}
}

// checkStructShape is checkShape for a struct type t: v must be a
// mapping whose keys are t's JSON field names, each checked in key order.
func checkStructShape(v any, t reflect.Type, path string, ps *problems) {
	m, ok := v.(map[string]any)
	if !ok {
		ps.add(path, "is %s; want a mapping", kindOf(v))
		return
	}
	fields := map[string]reflect.Type{}
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields[name] = f.Type
		names = append(names, name)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		ft, ok := fields[k]
		if !ok {
			ps.add(join(path, k), "unknown field; want one of %s", strings.Join(names, ", "))
			continue
		}
		checkShape(m[k], ft, join(path, k), ps)
	}
}

// checkScalarShape is checkShape for a string, integer, number or
// boolean type t.
func checkScalarShape(v any, t reflect.Type, path string, ps *problems) {
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			ps.add(path, "is %s; want a string (quote it in YAML)", kindOf(v))
		}
	case reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			ps.add(path, "is %s; want an integer", kindOf(v))
			return
		}
		if _, err := strconv.ParseInt(string(n), 10, 64); err != nil {
			ps.add(path, "%s is not a 64-bit integer", n)
		}
	case reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			ps.add(path, "is %s; want a number", kindOf(v))
			return
		}
		if _, err := strconv.ParseFloat(string(n), 64); err != nil {
			ps.add(path, "%s is not a number", n)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			ps.add(path, "is %s; want true or false", kindOf(v))
		}
	default:
		ps.add(path, "has a schema type %v this decoder does not know", t)
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// kindOf names the JSON kind of a decoded value for error messages,
// without quoting the value itself.
func kindOf(v any) string {
	switch v := v.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// fileExtensions are the suffixes Load reads as policy files.
var fileExtensions = []string{".yaml", ".yml", ".json"}

// FileChecks are the checks LoadChecked makes on a policy file beyond
// those every policy file gets. The zero value adds none and accepts the
// backends package sandbox names.
type FileChecks struct {
	// Backends are the backends the file may name, in the order an error
	// lists them: the program's backend registry's
	// (backend.Registry.Names), so that a backend known only by its
	// registration (kubernetes) is one a policy may name. Nil means those
	// package sandbox names: oci, docker, containerd and local.
	Backends []sandbox.Backend
	// OperatorOwned requires a policy file that only the operator could
	// have written: owned by root or the invoking user and writable by
	// nobody else. A file named on the command line needs it.
	OperatorOwned bool
	// Outside are directories the file must not lie in: the workspace of
	// the call and every configured workspace root, which sandboxed calls
	// can write.
	Outside []safefile.Dir
}

// LoadChecked is Load with the extra checks of fc on a policy file (a
// built-in profile needs none). Every policy file is opened as data
// (DESIGN §3.10): no symbolic link in any component of its path, opened
// without blocking, a regular file of at most MaxFileSize bytes, so that a
// FIFO, a device, a directory or a link planted in its place is an error
// at once. Errors wrap sandbox.ErrInvalid, name the file and say which
// check failed.
func LoadChecked(nameOrFile string, fc FileChecks) (sandbox.Policy, error) {
	if p, ok := Builtin(nameOrFile); ok {
		return p, nil
	}
	ext := strings.ToLower(filepath.Ext(nameOrFile))
	if !slices.Contains(fileExtensions, ext) {
		return sandbox.Policy{}, invalidf("%q is neither a built-in profile (%s) nor a .yaml, .yml or .json file",
			nameOrFile, strings.Join(Builtins(), ", "))
	}
	data, err := safefile.Read(nameOrFile, safefile.Options{
		MaxBytes:      MaxFileSize,
		OperatorOwned: fc.OperatorOwned,
		Outside:       fc.Outside,
	})
	if err != nil {
		return sandbox.Policy{}, sandbox.Errorf(sandbox.ErrInvalid, "policy file %w", err)
	}
	name := strings.TrimSuffix(filepath.Base(nameOrFile), filepath.Ext(nameOrFile))
	if validName(name) != nil {
		name = "custom"
	}
	backends := fc.Backends
	if backends == nil {
		backends = defaultBackends
	}
	return parse(data, name, "policy file "+nameOrFile, backends)
}
