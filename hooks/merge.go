package hooks

import "strings"

// Outcome is the merged outcome of every hook that ran for one event. It is
// a plain value; the zero value is "no hook ran".
type Outcome struct {
	// Decision is the highest-ranked decision of any hook: Deny or Block
	// over Ask over Allow; "" when no hook decided.
	Decision string `json:"decision"`
	// Reason joins, with newlines and in file order, the non-empty
	// reasons of the hooks whose decision has Decision's rank.
	Reason string `json:"reason"`
	// Stop is true when any hook asked the agent to stop; StopReason
	// joins their reasons.
	Stop       bool   `json:"stop"`
	StopReason string `json:"stopReason,omitempty"`
	// AdditionalContext and SystemMessage join every hook's, with
	// newlines, in file order.
	AdditionalContext string `json:"additionalContext"`
	SystemMessage     string `json:"systemMessage"`
	// Hooks are the results of each hook, in file order.
	Hooks []HookResult `json:"hooks"`
}

// Blocks reports whether the outcome blocks or denies the action, or stops
// the agent.
func (o *Outcome) Blocks() bool {
	return o.Stop || rank(o.Decision) == rank(Deny)
}

// Merge merges hook results in the order given. It is pure.
func Merge(results []HookResult) *Outcome {
	o := &Outcome{Hooks: results}
	if o.Hooks == nil {
		o.Hooks = []HookResult{}
	}
	var reasons, stops, contexts, messages []string
	for _, r := range results {
		if rank(r.Decision) > rank(o.Decision) {
			o.Decision, reasons = r.Decision, nil
		}
		if r.Decision != "" && rank(r.Decision) == rank(o.Decision) && r.Reason != "" {
			reasons = append(reasons, r.Reason)
		}
		if r.Stop {
			o.Stop = true
			if r.StopReason != "" {
				stops = append(stops, r.StopReason)
			}
		}
		if r.AdditionalContext != "" {
			contexts = append(contexts, r.AdditionalContext)
		}
		if r.SystemMessage != "" {
			messages = append(messages, r.SystemMessage)
		}
	}
	o.Reason = strings.Join(reasons, "\n")
	o.StopReason = strings.Join(stops, "\n")
	o.AdditionalContext = strings.Join(contexts, "\n")
	o.SystemMessage = strings.Join(messages, "\n")
	return o
}
