//go:build containerd

// The containerd tests need a running containerd; they are not yet part of
// CI (see the Docker and containerd issue). Run them with: eval "$(scripts/daemons.sh start)";
// go test -tags containerd ./sandbox/containerd

package containerd

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/images"
)

// testRootfsTar builds the test image: the busybox root filesystem of
// images.BusyboxRootfsTar plus the host's bash and the shared libraries
// it needs, so that calls run under `bash -c` as they do on the host
// image (the conformance suite relies on bash semantics, e.g. a failed
// redirection of `:` does not end the shell).
func testRootfsTar(w io.Writer) error {
	var base bytes.Buffer
	if err := images.BusyboxRootfsTar(&base, images.DefaultBusyboxPath); err != nil {
		return err
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return err
	}
	bash, err = filepath.EvalSymlinks(bash)
	if err != nil {
		return err
	}
	files := []string{bash}
	out, err := exec.Command("ldd", bash).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", bash, err)
	}
	for _, m := range regexp.MustCompile(`(/\S+)`).FindAllString(string(out), -1) {
		files = append(files, m)
	}
	tw := tar.NewWriter(w)
	tr := tar.NewReader(&base)
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		seen[path.Clean("/"+h.Name)] = true
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	add := func(target, source string) error {
		var dirs []string
		for d := path.Dir(target); d != "/" && !seen[d]; d = path.Dir(d) {
			dirs = append([]string{d}, dirs...)
		}
		for _, d := range dirs {
			seen[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		data, err := os.ReadFile(source)
		if err != nil {
			return err
		}
		seen[target] = true
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(target, "/"), Mode: 0o755, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	}
	if err := add("/bin/bash", bash); err != nil {
		return err
	}
	for _, f := range files[1:] {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return err
		}
		if seen[f] {
			continue
		}
		if err := add(f, real); err != nil {
			return err
		}
	}
	return tw.Close()
}
