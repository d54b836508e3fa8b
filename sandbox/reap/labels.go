package reap

import "strings"

// Label keys carried by every container, bundle and other object a
// backend creates, so that a reaper can find what a crashed instance
// left (DESIGN §3.8). Keys in the "dsh-sandbox." namespace are reserved.
const (
	// LabelOwner marks an object as ours; its value is LabelOwnerValue.
	LabelOwner = "dsh-sandbox.owner"
	// LabelInstance is the id of the service instance that created it.
	LabelInstance = "dsh-sandbox.instance"
	// LabelExecution is the id of the call (Call.ID).
	LabelExecution = "dsh-sandbox.execution"
	// LabelSession is the agent session id; empty for a call with no agent.
	LabelSession = "dsh-sandbox.session"

	// LabelOwnerValue is the value of LabelOwner.
	LabelOwnerValue = "dsh-sandbox"

	labelNamespace = "dsh-sandbox."
)

// Labels returns a new map with the four reserved labels, always all
// present (session may be empty), plus the entries of extra whose keys lie
// outside the reserved "dsh-sandbox." namespace; reserved keys in extra
// are dropped so that a caller cannot forge ownership or another session.
// extra is not modified and may be nil.
func Labels(instance, execution, session string, extra map[string]string) map[string]string {
	m := make(map[string]string, len(extra)+4)
	for k, v := range extra {
		if !strings.HasPrefix(strings.ToLower(k), labelNamespace) {
			m[k] = v
		}
	}
	m[LabelOwner] = LabelOwnerValue
	m[LabelInstance] = instance
	m[LabelExecution] = execution
	m[LabelSession] = session
	return m
}
