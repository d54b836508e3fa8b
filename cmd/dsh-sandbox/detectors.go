package main

import "github.com/dsh-sandbox/dsh-sandbox/redact/detect"

// The pattern detector of policy redact.detectors: gitleaks's rules,
// linked by the command only (redact/detect).
func init() { detect.Register() }
