package policy

import (
	"encoding/json"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Format writes p as a policy file (indented JSON, which is also YAML)
// with every key explicit, sizes in binary units where exact. p is
// normalized first; Parse(Format(p)) returns the normalized p, digest
// included.
func Format(p sandbox.Policy) ([]byte, error) {
	p, err := Normalize(p)
	if err != nil {
		return nil, err
	}
	s, size := ptr[string], sizeText
	doc := document{
		Name: s(p.Name), Backend: s(string(p.Backend)), Runtime: s(string(p.Runtime)), Image: s(p.Image),
		User: s(string(p.User)), Network: &networkValue{Mode: s(string(p.Network)), Allow: p.NetworkAllow, Deny: p.NetworkDeny},
		Workspace: s(string(p.Workspace)), Transcript: s(string(p.Transcript)),
		Limits: &documentLimits{
			Memory:         size(p.Limits.MemoryBytes),
			CPUs:           &p.Limits.CPUs,
			Pids:           &p.Limits.Pids,
			TimeoutMs:      &p.Limits.TimeoutMs,
			MaxTimeoutMs:   &p.Limits.MaxTimeoutMs,
			JobTimeoutMs:   jobTimeout(p.Limits.JobTimeoutMs),
			StdoutMaxBytes: size(int64(p.Limits.StdoutMaxBytes)),
			SpillMaxBytes:  size(p.Limits.SpillMaxBytes),
		},
		Env: &documentEnv{Inherit: p.EnvInherit, AllowSecrets: p.EnvAllowSecrets, Set: map[string]scalarValue{}},
	}
	doc.Network.Credentials = credentialsDocument(p.Credentials)
	if doc.Env.Inherit == nil {
		doc.Env.Inherit = []string{} // explicit: inherit nothing
	}
	for k, v := range p.EnvSet {
		doc.Env.Set[k] = scalarValue(v)
	}
	if p.Pull != "" {
		doc.Pull = s(string(p.Pull))
	}
	if p.VerifyKeys != nil {
		doc.Verify = &documentVerify{Keys: p.VerifyKeys}
	}
	if p.DenyTTY {
		allow := false
		doc.TTY = &allow
	}
	if p.RedactEnv != nil || p.RedactFiles != nil || p.RedactDetectors {
		doc.Redact = &documentRedact{Env: p.RedactEnv, Files: p.RedactFiles}
		if p.RedactDetectors {
			doc.Redact.Detectors = &p.RedactDetectors
		}
	}
	if p.Limits.SpillTotalBytes > 0 {
		doc.Limits.SpillTotalBytes = size(p.Limits.SpillTotalBytes)
	}
	if p.Limits.WorkspaceBytes > 0 {
		doc.Limits.WorkspaceBytes = size(p.Limits.WorkspaceBytes)
	}
	if p.Limits.SpillRetentionMs > 0 {
		r := (time.Duration(p.Limits.SpillRetentionMs) * time.Millisecond).String()
		doc.Limits.SpillRetention = &r
	}
	mountsDocument(p, &doc)
	return json.MarshalIndent(doc, "", "  ")
}

// sizeText is a size as a policy file writes it: in binary units where
// exact (formatSize).
func sizeText(n int64) *sizeValue { v := sizeValue(formatSize(n)); return &v }

// credentialsDocument is network.credentials as a policy file writes it;
// nil for none.
func credentialsDocument(cs []sandbox.Credential) []documentCredential {
	s := ptr[string]
	var out []documentCredential
	for _, c := range cs {
		port := int64(c.Port)
		dc := documentCredential{Name: s(c.Name), Host: s(c.Host), Port: &port, Header: s(c.Header), Format: s(c.Format), Value: &documentCredentialValue{}}
		if c.Variable != "" {
			dc.Variable = s(c.Variable)
		}
		if c.ValueEnv != "" {
			dc.Value.Env = s(c.ValueEnv)
		}
		if c.ValueFile != "" {
			dc.Value.File = s(c.ValueFile)
		}
		if c.UpstreamCAFile != "" {
			dc.UpstreamCA = s(c.UpstreamCAFile)
		}
		out = append(out, dc)
	}
	return out
}

// mountsDocument sets doc's mounts (always present, maybe empty), mount
// roots and tmpfs from p's.
func mountsDocument(p sandbox.Policy, doc *document) {
	s := ptr[string]
	doc.Mounts = []documentMount{}
	for _, m := range p.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		doc.Mounts = append(doc.Mounts, documentMount{Source: s(m.Source), Target: s(m.Target), Mode: s(mode)})
	}
	for _, r := range p.MountRoots {
		mode := "rw"
		if r.ReadOnly {
			mode = "ro"
		}
		doc.MountRoots = append(doc.MountRoots, documentRoot{Path: s(r.Path), Mode: s(mode)})
	}
	for _, t := range p.Tmpfs {
		dt := documentTmpfs{Target: s(t.Target)}
		if t.SizeBytes > 0 {
			dt.Size = sizeText(t.SizeBytes)
		}
		doc.Tmpfs = append(doc.Tmpfs, dt)
	}
}

// jobTimeout is limits.jobTimeoutMs as a policy file writes it: absent
// for none.
func jobTimeout(ms int64) *int64 {
	if ms == 0 {
		return nil
	}
	return &ms
}
