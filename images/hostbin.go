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
	var add []hostFile
	for _, name := range names {
		files, err := hostBinary(name)
		if err != nil {
			return err
		}
		add = append(add, files...)
	}
	tw := tar.NewWriter(w)
	seen, err := copyBase(tw, base)
	if err != nil {
		return err
	}
	for _, f := range add {
		if err := addHostFile(tw, f, seen); err != nil {
			return err
		}
	}
	return tw.Close()
}

// hostFile is a host file AddHostBinaries stores: source on the host,
// target in the image.
type hostFile struct{ target, source string }

// hostBinary returns the files the host program name needs in an image:
// the program itself as /bin/<name> and the shared libraries ldd lists
// for it at their own paths, each read from the host with its links
// resolved.
func hostBinary(name string) ([]hostFile, error) {
	if name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("host binary %q: want a command name", name)
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("host binary %q: %w", name, err)
	}
	if bin, err = filepath.EvalSymlinks(bin); err != nil {
		return nil, fmt.Errorf("host binary %q: %w", name, err)
	}
	files := []hostFile{{"/bin/" + name, bin}}
	out, err := exec.Command("ldd", bin).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return files, nil // ldd exits 1 for a static binary: no libraries
	}
	if err != nil {
		return nil, fmt.Errorf("host binary %q: ldd: %w", name, err)
	}
	for _, lib := range lddPath.FindAllString(string(out), -1) {
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return nil, fmt.Errorf("host binary %q: library %s: %w", name, lib, err)
		}
		files = append(files, hostFile{lib, real})
	}
	return files, nil
}

// copyBase copies the entries of the tarball base to tw and returns the
// set of paths it holds ("/" and each entry's clean absolute name).
func copyBase(tw *tar.Writer, base io.Reader) (map[string]bool, error) {
	tr := tar.NewReader(base)
	seen := map[string]bool{"/": true}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return seen, nil
		}
		if err != nil {
			return nil, fmt.Errorf("base rootfs: %w", err)
		}
		seen[path.Clean("/"+h.Name)] = true
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, fmt.Errorf("base rootfs: %w", err)
		}
	}
}

// addHostFile writes f to tw, after the directories of its path that
// seen (the paths tw holds) lacks, and adds what it wrote to seen; a
// target tw already holds is left as it is.
func addHostFile(tw *tar.Writer, f hostFile, seen map[string]bool) error {
	if seen[f.target] {
		return nil
	}
	var dirs []string
	for d := path.Dir(f.target); !seen[d]; d = path.Dir(d) {
		dirs = append(dirs, d)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		seen[dirs[i]] = true
		h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dirs[i], "/") + "/", Mode: 0o755, ModTime: busyboxEpoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	if err := copyFileEntry(tw, f.target, f.source); err != nil {
		return err
	}
	seen[f.target] = true
	return nil
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
