package containerd

import (
	"bytes"
	"context"
	"os/exec"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// runtimeChecks are the doctor's checks of the runc the shim runs: a
// "runtime" check with its path and version, then the self-test of each
// runtime escape's containment (idmap.CVESelfTests).
func runtimeChecks(ctx context.Context) []doctor.Check {
	path, err := exec.LookPath("runc")
	if err != nil {
		return []doctor.Check{{Name: "runtime", Detail: "runc (the shim's runtime): " + err.Error()}}
	}
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	c := doctor.Check{Name: "runtime", OK: err == nil, Detail: path}
	if err != nil {
		c.Detail += ": --version: " + err.Error()
	} else {
		line, _, _ := bytes.Cut(out, []byte("\n"))
		c.Detail += ": " + string(line)
	}
	return append([]doctor.Check{c}, idmap.CVESelfTests(path)...)
}
