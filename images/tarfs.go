package images

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// WriteRootfsTar writes the root filesystem of img as an uncompressed
// tarball to w: directories, regular files and symbolic links with their
// modes and owners (an extracted image holds nothing else: the importer
// refuses devices and FIFOs). A hard-linked file is written once per
// name. It lets an image imported here, with the safe extractor's
// checks, be loaded into a daemon backend. progress, when not nil, is
// called with the bytes of file content written so far; img.Size is the
// total. The host image has no root filesystem of its own and is refused.
func WriteRootfsTar(ctx context.Context, w io.Writer, img *Image, progress func(done int64)) error {
	if img.Host || img.Rootfs == "" {
		return fmt.Errorf("%w: image %q has no root filesystem to export", ErrInvalid, img.Name)
	}
	tw := tar.NewWriter(w)
	var done int64
	err := filepath.WalkDir(img.Rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(img.Rootfs, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		switch {
		case fi.IsDir():
			h.Name = filepath.ToSlash(rel) + "/"
			if rel == "." {
				h.Name = "./"
			}
		case fi.Mode().IsRegular(), fi.Mode()&fs.ModeSymlink != 0:
			h.Name = filepath.ToSlash(rel)
		default:
			return fmt.Errorf("%s: unexpected file type %v in an imported image", rel, fi.Mode().Type())
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		}
		h.Uname, h.Gname = "", ""
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		done += n
		if progress != nil {
			progress(done)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("image %q: export root filesystem: %w", img.Name, err)
	}
	return tw.Close()
}
