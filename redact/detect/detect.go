// Package detect is the pattern detector of policy redact.detectors:
// gitleaks's default rules (tokens of GitHub, AWS, Slack, private keys
// and some 200 more), as a redact.Detector. Only the command
// (cmd/dsh-sandbox) imports this package: it makes one Gitleaks and
// passes it down to where Sets are made (redact.Options.Detector), so
// that sandbox and the client do not link gitleaks.
package detect

import (
	"sync"

	"github.com/rs/zerolog"
	"github.com/zricethezav/gitleaks/v8/detect"
	"github.com/zricethezav/gitleaks/v8/logging"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
)

// Gitleaks is a redact.Detector with gitleaks's default configuration,
// compiled on first use. The zero value is ready; it is safe for
// concurrent use.
type Gitleaks struct {
	once sync.Once
	d    *detect.Detector
	err  error
}

var _ redact.Detector = (*Gitleaks)(nil)

// Find returns gitleaks's findings in text. If the default
// configuration does not compile (a broken build of gitleaks), it
// panics: a detector that silently finds nothing would pass secrets.
func (g *Gitleaks) Find(text []byte) []redact.Finding {
	g.once.Do(func() {
		// gitleaks logs to stderr through a global logger; the service's
		// output is not the place for it (and a finding's log names the
		// secret).
		logging.Logger = zerolog.Nop()
		g.d, g.err = detect.NewDetectorDefaultConfig()
		if g.d != nil {
			// A "gitleaks:allow" comment marks a line as fine to commit;
			// the command's output could write it next to a real secret.
			g.d.IgnoreGitleaksAllow = true
		}
	})
	if g.err != nil {
		panic("detect: gitleaks's default configuration: " + g.err.Error())
	}
	var out []redact.Finding
	for _, f := range g.d.DetectBytes(text) {
		secret := f.Secret
		if secret == "" {
			secret = f.Match
		}
		out = append(out, redact.Finding{Rule: f.RuleID, Secret: secret})
	}
	return out
}
