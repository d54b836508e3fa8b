package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// lddPath matches the absolute paths in ldd's output.
var lddPath = regexp.MustCompile(`(/\S+)`)

// AddHostBinaries copies the uncompressed root-filesystem tarball base to
// w and adds host programs to it: each name is looked up in PATH and
// stored as /bin/<name>, with the shared libraries ldd lists for it at
// their own paths, so that the program runs in a container of the
// image. Directories missing in base are added (mode 0755); a path base
// already has is kept as it is. It is meant for test and demo images
// (busybox plus the host's bash) when no registry is reachable.
func AddHostBinaries(w io.Writer, base io.Reader, names ...string) error {
	type entry struct{ target, source string }
	var add []entry
	for _, name := range names {
		if name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("host binary %q: want a command name", name)
		}
		bin, err := exec.LookPath(name)
		if err != nil {
			return fmt.Errorf("host binary %q: %w", name, err)
		}
		if bin, err = filepath.EvalSymlinks(bin); err != nil {
			return fmt.Errorf("host binary %q: %w", name, err)
		}
		add = append(add, entry{"/bin/" + name, bin})
		out, err := exec.Command("ldd", bin).Output()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			continue // ldd exits 1 for a static binary: no libraries
		}
		if err != nil {
			return fmt.Errorf("host binary %q: ldd: %w", name, err)
		}
		for _, lib := range lddPath.FindAllString(string(out), -1) {
			real, err := filepath.EvalSymlinks(lib)
			if err != nil {
				return fmt.Errorf("host binary %q: library %s: %w", name, lib, err)
			}
			add = append(add, entry{lib, real})
		}
	}

	tw := tar.NewWriter(w)
	tr := tar.NewReader(base)
	seen := map[string]bool{"/": true}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("base rootfs: %w", err)
		}
		seen[path.Clean("/"+h.Name)] = true
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return fmt.Errorf("base rootfs: %w", err)
		}
	}
	for _, e := range add {
		if seen[e.target] {
			continue
		}
		var dirs []string
		for d := path.Dir(e.target); !seen[d]; d = path.Dir(d) {
			dirs = append(dirs, d)
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			seen[dirs[i]] = true
			h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dirs[i], "/") + "/", Mode: 0o755, ModTime: busyboxEpoch, Format: tar.FormatPAX}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
		}
		if err := copyFileEntry(tw, e.target, e.source); err != nil {
			return err
		}
		seen[e.target] = true
	}
	return tw.Close()
}

// copyFileEntry writes the regular file source as target (mode 0755).
func copyFileEntry(tw *tar.Writer, target, source string) error {
	f, err := os.Open(source)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", source)
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(target, "/"), Mode: 0o755, Size: fi.Size(), ModTime: busyboxEpoch, Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if n, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	} else if n != fi.Size() {
		return fmt.Errorf("%s: changed size while copying", source)
	}
	return nil
}

// BusyboxWith writes the busybox root filesystem of BusyboxRootfsTar
// (from DefaultBusyboxPath) with the host programs names added
// (AddHostBinaries): the image the backend tests and demos build.
func BusyboxWith(w io.Writer, names ...string) error {
	var base bytes.Buffer
	if err := BusyboxRootfsTar(&base, DefaultBusyboxPath); err != nil {
		return err
	}
	return AddHostBinaries(w, &base, names...)
}
