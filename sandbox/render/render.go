package render

import (
	"strconv"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Result returns the model-facing text of a foreground result, in the
// format of dsh's bash tool (DESIGN §3.7), so that prompts and parsers
// written for dsh read it unchanged:
//
//   - stdout, then "[stderr]\n" and stderr when stderr is not empty
//     (starting on a new line); "(no output)" when both are empty;
//   - a truncated stream is followed by "\n[output truncated; full
//     output: PATH]"; when the spill file is not visible inside the
//     sandbox the path is followed by " (outside the sandbox: not
//     readable by commands)"; without a spill file PATH is
//     "(unavailable)";
//   - then, each on its own line: "[aborted]" when the caller cancelled
//     the call, "[timed out after Nms]" when it timed out, and last
//     "[killed by signal: SIG]" or "[exit code: N]" (only when N ≠ 0;
//     "[exit code: unknown]" when the result has neither a code nor a
//     signal);
//   - when the out-of-memory killer struck (Result.OOMKilled), the
//     signal line reads "[killed by signal: SIG (out of memory)]"; when
//     the command survived the kill of one of its processes, a line
//     "[out of memory: a process of the command was killed]" comes
//     before the exit code line. Without an OOM kill nothing changes;
//   - when the egress policy denied connections (Result.Egress), the last
//     line is DenialNote's, naming the hosts. Without denials nothing
//     changes.
//
// A nil res renders as "". Render is pure.
func Result(res *sandbox.Result) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	out := renderStream(res.Stdout)
	errText := renderStream(res.Stderr)
	b.Grow(len(out) + len(errText) + 128)
	b.WriteString(out)
	if errText != "" {
		if b.Len() > 0 && !strings.HasSuffix(out, "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("[stderr]\n")
		b.WriteString(errText)
	}
	if b.Len() == 0 {
		b.WriteString("(no output)")
	}

	var markers []string
	if res.Aborted {
		markers = append(markers, "[aborted]")
	}
	if res.TimedOut {
		markers = append(markers, "[timed out after "+strconv.FormatInt(res.TimeoutMs, 10)+"ms]")
	}
	if res.OOMKilled && res.Signal == "" {
		markers = append(markers, "[out of memory: a process of the command was killed]")
	}
	switch {
	case res.Signal != "" && res.OOMKilled:
		markers = append(markers, "[killed by signal: "+res.Signal+" (out of memory)]")
	case res.Signal != "":
		markers = append(markers, "[killed by signal: "+res.Signal+"]")
	case res.ExitCode == nil:
		markers = append(markers, "[exit code: unknown]")
	case *res.ExitCode != 0:
		markers = append(markers, "[exit code: "+strconv.Itoa(*res.ExitCode)+"]")
	}
	if note := DenialNote(res.Egress); note != "" {
		markers = append(markers, note)
	}
	if len(markers) == 0 {
		return b.String()
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	b.WriteString(strings.Join(markers, "\n"))
	return b.String()
}

// renderStream is a stream's text with its truncation notice.
func renderStream(s sandbox.Stream) string {
	if !s.Truncated {
		return s.Text
	}
	var where string
	switch {
	case s.SpillPath == "":
		where = "(unavailable)"
	case s.SpillInside:
		where = s.SpillPath
	default:
		where = s.SpillPath + " (outside the sandbox: not readable by commands)"
	}
	return s.Text + "\n[output truncated; full output: " + where + "]"
}
