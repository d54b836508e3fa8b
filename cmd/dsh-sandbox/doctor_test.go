package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctorCredentials: doctor --policy-file checks every credential
// source of the policy now: a set service variable and an
// operator-owned file pass; an unset variable, a missing file, a file
// others may write and an upstream CA file without a certificate each
// fail, naming the credential and the source and never a value. A
// policy whose sources are all readable makes the entry usable.
func TestDoctorCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("policy and credential files must be operator-owned (root): run as root")
	}
	tmp := t.TempDir()
	const envValue, fileValue = "envSecretValue-0451", "fileSecretValue-1984"
	t.Setenv("DSH_TEST_DOCTOR_TOKEN", envValue)
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := write("token", fileValue+"\n", 0o600)
	loose := write("loose.token", fileValue+"\n", 0o666)
	noPEM := write("no-ca.pem", "not a certificate\n", 0o644)
	missing := filepath.Join(tmp, "missing.token")
	entry := func(name, host, value string, extra string) string {
		return fmt.Sprintf("    - {name: %s, host: %s, value: %s%s}\n", name, host, value, extra)
	}
	policyFile := func(name string, entries ...string) string {
		return write(name+".yaml", "name: "+name+"\nbackend: oci\nnetwork:\n  mode: allowlist\n  allow: [a.test, b.test, c.test, d.test, e.test, f.test]\n  credentials:\n"+strings.Join(entries, ""), 0o644)
	}
	good := []string{
		entry("env", "a.test", "{env: DSH_TEST_DOCTOR_TOKEN}", ""),
		entry("file", "b.test", "{file: "+token+"}", ""),
	}
	bad := policyFile("bad", append(good,
		entry("unset", "c.test", "{env: DSH_TEST_DOCTOR_UNSET}", ""),
		entry("missing", "d.test", "{file: "+missing+"}", ""),
		entry("loose", "e.test", "{file: "+loose+"}", ""),
		entry("noca", "f.test", "{file: "+token+"}", ", upstreamCA: "+noPEM),
	)...)
	doctor := func(pol string) (checks []struct {
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	}, usable bool) {
		t.Helper()
		out, errOut, _ := run(t, "--home", filepath.Join(tmp, "home"), "--state-dir", filepath.Join(tmp, "state"), "--data-dir", filepath.Join(tmp, "data"),
			"doctor", "--json", "--policy-file", pol,
			"--docker-host", "unix://"+filepath.Join(tmp, "no-docker.sock"), "--containerd-address", filepath.Join(tmp, "no-containerd.sock"))
		if strings.Contains(out+errOut, envValue) || strings.Contains(out+errOut, fileValue) {
			t.Errorf("doctor's output holds a credential's value")
		}
		var reports []struct {
			Backend string `json:"backend"`
			Usable  bool   `json:"usable"`
			Checks  []struct {
				OK     bool   `json:"ok"`
				Detail string `json:"detail"`
			} `json:"checks"`
		}
		if err := json.Unmarshal([]byte(out), &reports); err != nil {
			t.Fatalf("doctor --json = %q (%s): %v", out, errOut, err)
		}
		for _, r := range reports {
			if r.Backend == "credentials" {
				for _, c := range r.Checks {
					checks = append(checks, struct {
						OK     bool   `json:"ok"`
						Detail string `json:"detail"`
					}(c))
				}
				return checks, r.Usable
			}
		}
		t.Fatalf("doctor --policy-file %s has no credentials entry: %s", pol, out)
		return nil, false
	}
	checks, usable := doctor(bad)
	want := []struct {
		ok   bool
		says string
	}{
		{true, `credential "env" for a.test:443: the service's variable DSH_TEST_DOCTOR_TOKEN is readable`},
		{true, `credential "file" for b.test:443: the file ` + token + ` is readable`},
		{false, `policy bad, credential "unset": the service's variable DSH_TEST_DOCTOR_UNSET is not set`},
		{false, `credential "missing"`},
		{false, `credential "loose"`},
		{false, `credential "noca": upstreamCA: ` + noPEM + ` holds no PEM certificate`},
	}
	if len(checks) != len(want) || usable {
		t.Fatalf("doctor credentials = %+v (usable %v), want %d checks, not usable", checks, usable, len(want))
	}
	for i, w := range want {
		if checks[i].OK != w.ok || !strings.Contains(checks[i].Detail, w.says) {
			t.Errorf("check %d = %+v, want ok %v saying %q", i, checks[i], w.ok, w.says)
		}
	}
	for i, path := range map[int]string{3: missing, 4: loose} {
		if !strings.Contains(checks[i].Detail, path) {
			t.Errorf("check %d = %q, want the file %s named", i, checks[i].Detail, path)
		}
	}
	// The legitimate variant: every source readable.
	if checks, usable := doctor(policyFile("good", good...)); len(checks) != 2 || !usable {
		t.Errorf("doctor credentials of a readable policy = %+v (usable %v), want 2 checks, usable", checks, usable)
	}
}
