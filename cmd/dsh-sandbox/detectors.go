package main

import (
	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/redact/detect"
)

// detector is the pattern detector of policy redact.detectors: gitleaks's
// rules, linked by the command only (redact/detect). The command passes
// it to everything that redacts a call's output, outcome or hook payload
// (the executors' driver.Service, api.Options, hooks.RunOptions,
// secrets.RedactOutcome); one value serves the whole process and compiles
// the rules once, on first use.
var detector redact.Detector = &detect.Gitleaks{}
