package oci

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"
)

// maxLogRead bounds how much of a runtime log is read for an error.
const maxLogRead = 64 << 10

// lastLogError returns the message of the last error-level entry of a
// runtime's JSON log (runc: {"level":"error","msg":…}; crun the same
// keys), else its last non-empty line, else "".
func lastLogError(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxLogRead {
		_, _ = f.Seek(fi.Size()-maxLogRead, io.SeekStart)
	}
	var lastErr, lastLine string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 16<<10), maxLogRead)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		lastLine = line
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil {
			switch strings.ToLower(entry.Level) {
			case "error", "fatal", "panic":
				lastErr = entry.Msg
			}
		}
	}
	if lastErr != "" {
		return lastErr
	}
	return lastLine
}
