package policy

import (
	"fmt"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// invalidf returns an invalid-argument error (sandbox.ErrInvalid, exit
// code 2) starting with "policy: ". Bad policies, sessions and arguments
// are invalid arguments; only a stat failure (ErrUnavailable) or a broken
// seccomp profile (ErrInternal) is anything else.
func invalidf(format string, args ...any) error {
	return sandbox.Errorf(sandbox.ErrInvalid, "policy: "+format, args...)
}

// problems collects the validation failures of one document so that a
// single error names all of them; each entry starts with the field path.
type problems []string

func (ps *problems) add(field, format string, args ...any) {
	if field == "" {
		field = "document"
	}
	*ps = append(*ps, field+": "+fmt.Sprintf(format, args...))
}

// err returns nil when nothing was collected, else one invalid-argument
// error listing every problem after where ("policy", "policy file x.yaml").
func (ps problems) err(where string) error {
	if len(ps) == 0 {
		return nil
	}
	return sandbox.Errorf(sandbox.ErrInvalid, "%s: %s", where, strings.Join(ps, "; "))
}
