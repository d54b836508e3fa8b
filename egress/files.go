package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
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
			err = publish(tmp.Name(), path, []byte(data))
		}
		os.Remove(tmp.Name())
		if err != nil {
			return fmt.Errorf("egress files: %w", err)
		}
	}
	return nil
}

// publish puts the file tmp at path unless a file with data is there
// already. A fitting file another call published meanwhile stays: calls
// bind it from a descriptor they opened, and replacing it would unlink
// what they are about to mount. Only a stale file is replaced.
func publish(tmp, path string, data []byte) error {
	err := os.Link(tmp, path)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, data) {
		return nil
	}
	return os.Rename(tmp, path)
}
