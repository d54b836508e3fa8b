package images

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"time"
)

// DefaultBusyboxPath is where Debian's busybox-static package installs the
// statically linked busybox binary.
const DefaultBusyboxPath = "/usr/bin/busybox"

// busyboxApplets are the commands linked to /bin/busybox by
// BusyboxRootfsTar; all are applets of Debian's busybox-static.
var busyboxApplets = []string{
	"[", "[[", "ash", "awk", "base64", "basename", "cat", "chmod", "cp",
	"cut", "date", "dd", "df", "diff", "dirname", "du", "echo", "env",
	"expr", "false", "find", "grep", "gunzip", "gzip", "head", "hostname",
	"id", "kill", "ln", "ls", "md5sum", "mkdir", "mktemp", "mount", "mv",
	"nproc", "od", "printf", "ps", "pwd", "readlink", "realpath", "rm",
	"rmdir", "sed", "seq", "sh", "sha256sum", "sleep", "sort", "stat",
	"tail", "tar", "tee", "test", "timeout", "touch", "tr", "true", "uname",
	"uniq", "wc", "which", "whoami", "xargs", "yes",
}

// busyboxEpoch is the modification time of every entry, so the tarball is
// reproducible.
var busyboxEpoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// BusyboxRootfsTar writes a minimal root-filesystem tarball (uncompressed)
// to w: /bin/busybox copied from busyboxPath (normally
// [DefaultBusyboxPath], a statically linked binary), symbolic links to it
// for the common commands (sh, env, cat, ls, id, sleep, echo, …, and
// /usr/bin/env), an /etc with passwd and group naming root and nobody,
// /tmp (mode 1777) and empty /proc, /dev, /sys and /root. It is meant for
// tests and demos that need a small image without a registry. When
// busyboxPath does not exist the error wraps fs.ErrNotExist.
func BusyboxRootfsTar(w io.Writer, busyboxPath string) error {
	f, err := os.Open(busyboxPath)
	if err != nil {
		return fmt.Errorf("busybox binary: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("busybox binary %q: %w", busyboxPath, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("busybox binary %q: not a regular file", busyboxPath)
	}

	tw := tar.NewWriter(w)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: busyboxEpoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data string) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: busyboxEpoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.WriteString(tw, data)
		return err
	}
	link := func(name, target string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: busyboxEpoch, Format: tar.FormatPAX})
	}

	for _, d := range []struct {
		name string
		mode int64
	}{
		{"./", 0o755}, {"bin/", 0o755}, {"dev/", 0o755}, {"etc/", 0o755},
		{"proc/", 0o555}, {"root/", 0o700}, {"sys/", 0o555}, {"tmp/", 0o1777},
		{"usr/", 0o755}, {"usr/bin/", 0o755},
	} {
		if err := dir(d.name, d.mode); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: fi.Size(), ModTime: busyboxEpoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if n, err := io.Copy(tw, f); err != nil {
		return fmt.Errorf("busybox binary %q: %w", busyboxPath, err)
	} else if n != fi.Size() {
		return fmt.Errorf("busybox binary %q: changed size while copying", busyboxPath)
	}
	for _, applet := range busyboxApplets {
		if err := link("bin/"+applet, "busybox"); err != nil {
			return err
		}
	}
	if err := link("usr/bin/env", "../../bin/busybox"); err != nil {
		return err
	}
	const (
		passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
		group  = "root:x:0:\nnogroup:x:65534:\n"
		hosts  = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	)
	for _, e := range []struct{ name, data string }{
		{"etc/group", group}, {"etc/hosts", hosts}, {"etc/passwd", passwd},
	} {
		if err := file(e.name, 0o644, e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
