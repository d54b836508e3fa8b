package overlay

// EnvPrefix is the namespace of every key in the registry (the design's
// DSH_ENV_PREFIX). A key is EnvPrefix followed by [A-Z][A-Z0-9_]*.
const EnvPrefix = "DSH_"

// The built-in keys. They are reserved in every Registry: Register refuses
// them and only RegisterBuiltIn may own them.
const (
	// KeyHome is the absolute dsh home directory.
	KeyHome = "DSH_HOME"
	// KeyShell is "1" in every child the sandbox starts.
	KeyShell = "DSH_SHELL"
	// KeySessionID is the id of the agent session that made the call; it is
	// absent for a call with no agent.
	KeySessionID = "DSH_SESSION_ID"
	// KeySessionJSONL is the absolute path of the session's JSONL
	// transcript; it is absent when the current persistence has no such
	// file for the session.
	KeySessionJSONL = "DSH_SESSION_JSONL"
)

// builtInKeys lists the reserved keys, sorted, with the description List
// shows while no built-in contributor owns the key. It is never modified.
var builtInKeys = [...]KeyDecl{
	{Key: KeyHome, Description: "absolute path of the dsh home directory"},
	{Key: KeySessionID, Description: "id of the calling agent's session; absent for a call with no agent"},
	{Key: KeySessionJSONL, Description: "absolute path of the session's JSONL transcript (mounted read-only); absent when the current persistence has no such file"},
	{Key: KeyShell, Description: `always "1": the command runs in a dsh shell call`},
}

// ValidKey reports whether key has the form DSH_[A-Z][A-Z0-9_]*.
func ValidKey(key string) bool {
	if len(key) <= len(EnvPrefix) || key[:len(EnvPrefix)] != EnvPrefix {
		return false
	}
	rest := key[len(EnvPrefix):]
	if rest[0] < 'A' || rest[0] > 'Z' {
		return false
	}
	for i := 1; i < len(rest); i++ {
		c := rest[i]
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// Reserved reports whether key is one of the built-in keys that only
// RegisterBuiltIn may own.
func Reserved(key string) bool {
	switch key {
	case KeyHome, KeyShell, KeySessionID, KeySessionJSONL:
		return true
	}
	return false
}
