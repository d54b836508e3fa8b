package deptest

import (
	"bufio"
	"bytes"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/dsh-sandbox/dsh-sandbox"

// allowed lists, per package (a trailing "/..." covers subpackages), the
// project packages it may import directly. The check below closes it
// transitively and compares against `go list -deps`.
var allowed = map[string][]string{
	"session":                 {},
	"persistence":             {"session"},
	"persistence/jsonl":       {"persistence", "session"},
	"persistence/sqlite":      {"persistence", "session"},
	"overlay":                 {"session"},
	"contributors":            {"overlay", "persistence", "session"},
	"sandbox":                 {"redact", "sandbox/signals"},
	"sandbox/signals":         {},
	"sandbox/process":         {"sandbox", "sandbox/signals"},
	"sandbox/render":          {"sandbox"},
	"sandbox/doctor":          {"sandbox"},
	"sandbox/cgroup":          {},
	"sandbox/acl":             {"sandbox"},
	"sandbox/hostpath":        {"sandbox", "sandbox/acl"},
	"sandbox/capture":         {"sandbox", "sandbox/acl", "sandbox/hostpath", "redact"},
	"sandbox/childenv":        {"sandbox"},
	"sandbox/secrets":         {"sandbox", "sandbox/childenv", "redact", "internal/safefile"},
	"sandbox/prepare":         {"sandbox", "sandbox/childenv", "sandbox/secrets", "sandbox/hostpath", "sandbox/quota", "sandbox/acl", "sandbox/capture", "sandbox/process"},
	"sandbox/jobs":            {"sandbox", "sandbox/prepare", "sandbox/capture"},
	"sandbox/quota":           {"sandbox/quota/quotatest"},
	"sandbox/quota/quotatest": {},
	"redact":                  {},
	"redact/detect":           {"redact"},
	"images":                  {},
	"images/registry":         {"images"},
	"policy":                  {"sandbox", "images", "internal/safefile", "egress", "sandbox/quota", "sandbox/acl", "sandbox/hostpath", "sandbox/prepare"},
	"egress":                  {"sandbox", "sandbox/secrets"},
	"sandbox/reap":            {"sandbox", "sandbox/hostpath"},
	"sandbox/oci":             {"sandbox/reap", "sandbox/driver", "sandbox", "images", "policy", "sandbox/idmap", "sandbox/console", "sandbox/sandboxtest", "sandbox/backend", "sandbox/stub", "sandbox/pool", "sandbox/capture", "sandbox/hostpath", "sandbox/process", "sandbox/doctor", "sandbox/cgroup"},
	"sandbox/local":           {"sandbox/driver", "sandbox", "images", "policy", "sandbox/sandboxtest", "sandbox/backend"},
	"sandbox/daemon":          {"sandbox"},
	"sandbox/docker":          {"sandbox/reap", "sandbox/daemon", "sandbox/driver", "sandbox", "images", "images/registry", "policy", "sandbox/idmap", "sandbox/sandboxtest", "sandbox/backend", "sandbox/stub", "sandbox/prepare", "sandbox/process", "sandbox/doctor"},
	"sandbox/containerd":      {"sandbox/reap", "sandbox/daemon", "sandbox/driver", "sandbox", "images", "images/registry", "policy", "sandbox/idmap", "sandbox/sandboxtest", "sandbox/backend", "sandbox/stub", "sandbox/process", "sandbox/doctor", "sandbox/cgroup"},
	"sandbox/backend":         {"sandbox", "images", "sandbox/pool", "sandbox/reap", "sandbox/doctor", "sandbox/driver"},
	"sandbox/driver":          {"sandbox", "images", "sandbox/sandboxtest", "sandbox/stub", "sandbox/reap", "sandbox/capture", "sandbox/prepare", "sandbox/process"},
	"sandbox/idmap":           {"sandbox", "policy", "sandbox/prepare", "sandbox/doctor"},
	"sandbox/console":         {"sandbox"},
	"sandbox/sandboxtest":     {"sandbox", "sandbox/childenv", "sandbox/jobs", "sandbox/render", "sandbox/doctor"},
	"sandbox/pool":            {},
	"sandbox/stub":            {},
	"sandbox/kubernetes":      {"sandbox/driver", "sandbox", "images", "policy", "sandbox/stub", "sandbox/sandboxtest", "sandbox/backend", "sandbox/containerd", "sandbox/reap", "sandbox/process", "sandbox/doctor"},
	"hooks":                   {"session", "persistence", "sandbox", "internal/safefile", "sandbox/secrets"},
	"hooks/claudecode":        {"hooks", "session", "persistence", "sandbox", "hooks/hookstest"},
	"hooks/codex":             {"hooks", "session", "persistence", "sandbox", "hooks/hookstest"},
	"hooks/hookstest":         {"hooks", "session", "persistence", "sandbox"},
	"agent":                   {"session", "persistence", "persistence/jsonl", "persistence/sqlite", "overlay", "contributors", "sandbox", "policy", "images", "hooks/...", "api/..."},
	"api/types":               {"sandbox", "session", "persistence"},
	"api/...":                 {"session", "persistence", "persistence/jsonl", "persistence/sqlite", "overlay", "contributors", "sandbox", "policy", "images", "hooks/...", "api/...", "request", "sandbox/childenv", "sandbox/hostpath", "sandbox/jobs", "sandbox/prepare", "sandbox/secrets", "sandbox/render"},
	"request":                 {"sandbox", "policy", "session", "persistence"},
	"replay":                  {},
	"mcpserver":               {"sandbox", "overlay", "contributors", "persistence", "session", "policy", "sandbox/childenv", "sandbox/jobs", "sandbox/render"},
	"cmd/...":                 {"*"},
	"integration/...":         {"*"},
	"interop/...":             {"*"},
	"internal/deptest":        {},
	"internal/fixtures":       {},
	"internal/fixtures/calls": {"sandbox", "redact"},
	"internal/logbridge":      {},
	"internal/safefile":       {},
}

// testSupport are packages every package's tests may import and no
// package's own code may; what they import in turn must be allowed for
// the package under test (internal/fixtures/calls links sandbox, so
// only tests of packages above the seam use it).
var testSupport = []string{"internal/fixtures", "internal/fixtures/calls"}

// backends may be picked only by cmd and integration.
var backends = []string{"sandbox/oci", "sandbox/local", "sandbox/docker", "sandbox/containerd", "sandbox/kubernetes"}

func rule(pkg string) ([]string, bool) {
	if r, ok := allowed[pkg]; ok {
		return r, true
	}
	for p := pkg; p != "." && p != "/"; p = path.Dir(p) {
		if r, ok := allowed[p+"/..."]; ok {
			return r, true
		}
	}
	return nil, false
}

func matches(pattern, pkg string) bool {
	if pattern == "*" {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pattern == pkg
}

// closure returns every project package pkg may reach through allowed
// direct imports.
func closure(pkg string, all []string) []string {
	seen := map[string]bool{pkg: true}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		r, _ := rule(p)
		for _, q := range all {
			if seen[q] {
				continue
			}
			for _, pat := range r {
				if matches(pat, q) {
					seen[q] = true
					queue = append(queue, q)
					break
				}
			}
		}
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	return out
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

func rel(importPath string) (string, bool) {
	if importPath == module {
		return ".", true
	}
	return strings.CutPrefix(importPath, module+"/")
}

func TestLayering(t *testing.T) {
	var pkgs []string
	for _, ip := range goList(t, "-tags", "integration", "./...") {
		if p, ok := rel(ip); ok {
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) < 3 {
		t.Fatalf("go list found only %v; run from the module", pkgs)
	}
	for _, pkg := range pkgs {
		if _, ok := rule(pkg); !ok {
			t.Errorf("package %s has no layering rule: add it to allowed in %s", pkg, "internal/deptest")
			continue
		}
		ok := closure(pkg, pkgs)
		for _, ip := range goList(t, "-tags", "integration", "-deps", "-test", module+"/"+pkg) {
			ip, _, _ = strings.Cut(ip, " ") // test variants look like "p [p.test]"
			dep, internal := rel(ip)
			if !internal || dep == pkg || dep == pkg+"_test" || strings.HasSuffix(dep, ".test") {
				continue
			}
			if !slices.Contains(ok, dep) && !slices.Contains(testSupport, dep) {
				t.Errorf("%s depends on %s, which DESIGN §2 forbids", pkg, dep)
			}
		}
	}
}

func TestBackendsPickedOnlyByCmd(t *testing.T) {
	for _, line := range goList(t, "-tags", "integration", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...") {
		fields := strings.Fields(line)
		pkg, _ := rel(fields[0])
		for _, imp := range fields[1:] {
			dep, internal := rel(imp)
			if internal && slices.Contains(testSupport, dep) {
				t.Errorf("%s imports %s outside its tests; it is test support only", pkg, dep)
			}
			if matches("cmd/...", pkg) || matches("integration/...", pkg) {
				continue
			}
			if internal && slices.Contains(backends, dep) && !strings.HasPrefix(pkg, dep) {
				t.Errorf("%s imports backend %s; only cmd/dsh-sandbox picks backends", pkg, dep)
			}
		}
	}
}

// unlinked lists, per package, outside modules it must not link, also
// indirectly: a client of the API links no server-side client library;
// the local backend, which talks to no daemon, no daemon client, and no
// logging library (the sandbox packages log through log/slog; only the
// command's top level has zerolog); images, which the local backend
// imports, no registry client (that is images/registry).
var unlinked = map[string][]string{
	"api/types":     {"google.golang.org/grpc", "github.com/docker/", "github.com/containerd/", "github.com/prometheus/", "github.com/rs/zerolog", "github.com/opencontainers/runtime-spec/"},
	"sandbox/local": {"google.golang.org/grpc", "github.com/docker/", "github.com/containerd/", "github.com/prometheus/", "github.com/rs/zerolog"},
	"images":        {"github.com/docker/", "github.com/google/go-containerregistry/pkg/authn", "github.com/google/go-containerregistry/pkg/v1/remote"},
}

func TestOutsideModulesUnlinked(t *testing.T) {
	for pkg, modules := range unlinked {
		for _, ip := range goList(t, "-deps", module+"/"+pkg) {
			for _, m := range modules {
				if ip == m || strings.HasPrefix(ip, strings.TrimSuffix(m, "/")+"/") {
					t.Errorf("%s links %s (of %s)", pkg, ip, m)
				}
			}
		}
	}
}
