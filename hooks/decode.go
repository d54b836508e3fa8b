package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Decisions of a hook and of a merged Outcome, by rank: Deny and Block
// outrank Ask, which outranks Allow; "" is no decision.
const (
	Allow = "allow"
	Ask   = "ask"
	Deny  = "deny"
	Block = "block"
)

// HookResult is the decoded outcome of one hook.
type HookResult struct {
	// Place is the hook's place in the configuration file.
	Place string `json:"place"`
	// Command is the command that ran.
	Command string `json:"command"`
	// ExitCode is the hook's exit status; nil when it did not exit
	// normally (killed, timed out, or the sandbox failed).
	ExitCode *int `json:"exitCode"`
	// Duration is how long the hook took, sandbox included.
	Duration time.Duration `json:"durationNs"`
	// Decision is Allow, Ask, Deny, Block or "".
	Decision string `json:"decision,omitempty"`
	// Reason explains Decision (stderr on exit 2).
	Reason string `json:"reason,omitempty"`
	// Stop is true when the hook asked the agent to stop
	// ("continue": false); StopReason says why.
	Stop       bool   `json:"stop,omitempty"`
	StopReason string `json:"stopReason,omitempty"`
	// SystemMessage is shown to the user.
	SystemMessage string `json:"systemMessage,omitempty"`
	// AdditionalContext is added to the model's context.
	AdditionalContext string `json:"additionalContext,omitempty"`
	// Output is stdout that was not decoded as JSON (the tail, when the
	// hook printed more than the kept tail).
	Output string `json:"output,omitempty"`
	// OutputTruncated is true when the hook printed more than the kept
	// tail; such output is never decoded as JSON.
	OutputTruncated bool `json:"outputTruncated,omitempty"`
	// Error describes a non-blocking failure: an exit code other than 0
	// and 2, a timeout, a signal, or a sandbox failure.
	Error string `json:"error,omitempty"`
}

// hookJSON is the JSON a hook may print on stdout with exit code 0.
type hookJSON struct {
	Continue           *bool  `json:"continue"`
	StopReason         string `json:"stopReason"`
	SystemMessage      string `json:"systemMessage"`
	Decision           string `json:"decision"`
	Reason             string `json:"reason"`
	HookSpecificOutput *struct {
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason"`
		AdditionalContext        string `json:"additionalContext"`
	} `json:"hookSpecificOutput"`
}

// Decode turns what a hook's run returned into a HookResult, for an event
// named event:
//
//   - runErr set or no result (the sandbox could not run the hook, so
//     what it guards was not checked): Block, failing closed;
//   - a timeout or a signal: a non-blocking error;
//   - exit 2: Block, with stderr (trimmed) as the reason;
//   - exit 0: stdout that is a whole, untruncated JSON object is decoded
//     (continue, stopReason, systemMessage, decision approve/block,
//     reason, hookSpecificOutput.permissionDecision allow/deny/ask,
//     permissionDecisionReason, additionalContext); anything else,
//     including malformed JSON and output longer than the kept tail, is
//     plain output, which on UserPromptSubmit and SessionStart becomes
//     additional context;
//   - any other exit code: a non-blocking error carrying stderr.
//
// Decode is pure.
func Decode(event string, res *sandbox.Result, runErr error) HookResult {
	var hr HookResult
	switch {
	case runErr != nil, res == nil:
		// The hook never ran, so whatever it guards was not checked: fail
		// closed. (A hook that ran and failed is a non-blocking error, as
		// in both dialects; a sandbox that could not run it is not that.)
		if runErr == nil {
			runErr = errors.New("no result")
		}
		hr.Error = "sandbox: " + runErr.Error()
		hr.Decision = Block
		hr.Reason = "the hook could not run in the sandbox (" + runErr.Error() + "); failing closed"
		return hr
	}
	hr.ExitCode = res.ExitCode
	stderr := strings.TrimSpace(res.Stderr.Text)
	switch {
	case res.TimedOut:
		hr.ExitCode = nil
		hr.Error = fmt.Sprintf("timed out after %dms; killed", res.TimeoutMs)
		return hr
	case res.Aborted:
		hr.ExitCode = nil
		hr.Error = "aborted; killed"
		return hr
	case res.ExitCode == nil:
		hr.Error = "killed by signal " + res.Signal
		return hr
	case *res.ExitCode == 2:
		hr.Decision = Block
		hr.Reason = stderr
		if hr.Reason == "" {
			hr.Reason = "hook exited 2"
		}
		return hr
	case *res.ExitCode != 0:
		hr.Error = fmt.Sprintf("exit code %d", *res.ExitCode)
		if stderr != "" {
			hr.Error += ": " + stderr
		}
		return hr
	}
	out := res.Stdout.Text
	hr.OutputTruncated = res.Stdout.Truncated
	if !res.Stdout.Truncated && decodeJSON(out, &hr) {
		return hr
	}
	hr.Output = out
	if (event == UserPromptSubmit || event == SessionStart) && strings.TrimSpace(out) != "" {
		hr.AdditionalContext = strings.TrimSpace(out)
	}
	return hr
}

// decodeJSON fills hr from out when out is exactly one JSON object.
func decodeJSON(out string, hr *HookResult) bool {
	t := bytes.TrimSpace([]byte(out))
	if len(t) == 0 || t[0] != '{' {
		return false
	}
	var j hookJSON
	dec := json.NewDecoder(bytes.NewReader(t))
	if err := dec.Decode(&j); err != nil || dec.More() {
		return false
	}
	if j.Continue != nil && !*j.Continue {
		hr.Stop = true
		hr.StopReason = j.StopReason
	}
	hr.SystemMessage = j.SystemMessage
	switch j.Decision {
	case "approve":
		hr.Decision, hr.Reason = Allow, j.Reason
	case "block":
		hr.Decision, hr.Reason = Block, j.Reason
	}
	if h := j.HookSpecificOutput; h != nil {
		hr.AdditionalContext = h.AdditionalContext
		switch d := h.PermissionDecision; d {
		case Allow, Ask, Deny:
			if rank(d) >= rank(hr.Decision) {
				hr.Decision, hr.Reason = d, h.PermissionDecisionReason
			}
		}
	}
	return true
}

// rank orders decisions for merging.
func rank(decision string) int {
	switch decision {
	case Deny, Block:
		return 3
	case Ask:
		return 2
	case Allow:
		return 1
	}
	return 0
}
