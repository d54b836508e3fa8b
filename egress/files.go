package egress

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// Names of the files WriteFiles keeps in its directory.
const (
	ResolvConfFile = "resolv.conf"
	NSSwitchFile   = "nsswitch.conf"
)

// WriteFiles makes sure dir (created 0755) holds ResolvConf and NSSwitch
// under ResolvConfFile and NSSwitchFile, world-readable, for calls to
// bind read-only over their /etc files. The content is the same for
// every call, so the files are shared; a file with other content is
// replaced atomically. It is safe for concurrent use, also by several
// processes.
func WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("egress files: %w", err)
	}
	for name, data := range map[string]string{ResolvConfFile: ResolvConf, NSSwitchFile: NSSwitch} {
		path := filepath.Join(dir, name)
		if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, []byte(data)) {
			continue
		}
		tmp, err := os.CreateTemp(dir, "."+name+"-*")
		if err != nil {
			return fmt.Errorf("egress files: %w", err)
		}
		_, err = tmp.WriteString(data)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("egress files: %w", err)
		}
	}
	return nil
}
