package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
)

func imagesCommand() *cli.Command {
	return &cli.Command{
		Name:  "images",
		Usage: "manage the images of the backends: import, build, pull from a registry, list, remove",
		Subcommands: []*cli.Command{
			{
				Name:      "import",
				Usage:     "import a root-filesystem tarball, a docker-archive or an OCI-layout tarball",
				ArgsUsage: "FILE",
				Description: `Unpacks FILE into the local image store under --data-dir (backend oci), or loads it
into the Docker engine (--backend docker, see --docker-host) or into containerd's namespace
(--backend containerd, see --containerd-address and --containerd-namespace). The same file
works for every backend: it is always unpacked by dsh-sandbox's own importer first, which
refuses path traversal, links that leave the root filesystem and device nodes, and strips
setuid bits; a daemon then receives the checked root filesystem. Shows progress on a
terminal. Policies name the image by NAME (policy.image, or exec --image).

NAME is [REGISTRY[:PORT]/][NAMESPACE/]REPOSITORY[:TAG], as the Docker engine spells
names; every backend stores it in the same canonical form, with the tag "latest" when
none is given and without Docker Hub's "docker.io/library/" (so "bb2", "bb2:latest"
and "docker.io/library/bb2" are one image). Digests (NAME@sha256:…) are refused.

Examples:
   dsh-sandbox images import --name busybox:1 busybox.tar
   dsh-sandbox images import --name busybox:1 --backend docker busybox.tar
   dsh-sandbox images import --name registry.example:5000/myorg/tools:1 tools.tar
   dsh-sandbox exec --backend docker --image busybox:1 -- id`,
				Flags: append([]cli.Flag{
					nameFlag,
					backendFlag("backend to import into"),
					jsonFlag,
				}, daemonFlags()...),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usageError("images import takes one FILE, got %d arguments", c.NArg())
					}
					return importImage(c, c.Args().First())
				},
			},
			imagesBuildCommand(),
			imagesPullCommand(),
			imagesRemoveCommand(),
			{
				Name:  "list",
				Usage: "list the images a backend has (oci: the local store, where host is always there)",
				Description: `Lists the images of the local store (--backend oci, the default; the generated host
image is always there), or the images dsh-sandbox imported into the Docker engine or into
containerd's namespace (--backend docker, containerd).

Examples:
   dsh-sandbox images list
   dsh-sandbox images list --backend containerd --json`,
				Flags: append([]cli.Flag{
					backendFlag("backend whose images to list"),
					jsonFlag,
				}, daemonFlags()...),
				Action: runImagesList,
			},
		},
	}
}

// runImagesList is images list.
func runImagesList(c *cli.Context) error {
	bd, err := imageBackend(c)
	if err != nil {
		return err
	}
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	imgs, err := s.listImages(c.Context, bd)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		if imgs == nil {
			imgs = []images.Image{}
		}
		if hostImage(bd) { // as the text lists it
			imgs = append([]images.Image{{Name: images.HostName, Host: true}}, imgs...)
		}
		return writeJSON(c.App.Writer, imgs)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDIGEST\tSIZE\tIMPORTED\tSOURCE")
	if hostImage(bd) {
		fmt.Fprintln(tw, "host\t-\t-\t-\t-")
	}
	for _, img := range imgs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", img.Name, img.Digest, img.Size, img.Imported.Format("2006-01-02 15:04"), imageSource(img))
	}
	return tw.Flush()
}

// imageSource is the SOURCE column of images list: the registry
// reference a pulled image came from (with "signed" when its signature
// was verified), "import" for images imported from files.
func imageSource(img images.Image) string {
	switch {
	case img.Source == "":
		return "import"
	case len(img.Signers) > 0:
		return img.Source + " (signed)"
	}
	return img.Source
}

// nameFlag is the --name of images import and build.
var nameFlag = &cli.StringFlag{Name: "name", Required: true, Usage: "image `NAME[:TAG]` ([REGISTRY/][NAMESPACE/]REPOSITORY[:TAG])"}

// backendFlag is the --backend of an images subcommand: the default
// backend, or another backend with images.
func backendFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "backend", Value: string(backends.Names(imageBackends)[0]),
		Usage: usage + ": " + sandbox.JoinModes(backends.Names(imageBackends), ", ")}
}

// imageBackend checks --backend of an images subcommand.
func imageBackend(c *cli.Context) (*backend.Descriptor, error) {
	return flagBackend("--backend", sandbox.Backend(c.String("backend")), imageBackends, " with images")
}

// hostImage reports whether the backend d runs the generated host image,
// listed first: the local store's backends.
func hostImage(d *backend.Descriptor) bool { return d.Images == backend.ImagesLocal }

// imageName checks and canonicalizes the image name of flag (or
// argument) what.
func imageName(what, name string) (string, error) {
	canon, err := images.CanonicalName(name)
	if err == nil && canon == images.HostName {
		err = fmt.Errorf("name %q is reserved for the generated host image", name)
	}
	if err != nil {
		return "", usageError("%s: %v", what, err)
	}
	return canon, nil
}

// storeError gives an error of the local image store its class.
func storeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, images.ErrInvalid):
		return sandbox.Errorf(sandbox.ErrInvalid, "%w", err)
	case errors.Is(err, images.ErrNotFound):
		return sandbox.Errorf(sandbox.ErrNotFound, "%w", err)
	case errors.Is(err, images.ErrInUse):
		return sandbox.Errorf(sandbox.ErrUnavailable, "%w", err)
	}
	return err
}

// importImage imports file as --name into --backend and reports it.
func importImage(c *cli.Context, file string) error {
	bd, err := imageBackend(c)
	if err != nil {
		return err
	}
	name, err := imageName("--name", c.String("name"))
	if err != nil {
		return err
	}
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	progress := progressBar(c.App.ErrWriter)
	var img *images.Image
	if bd.Images == backend.ImagesLocal {
		var st *images.Store
		if st, err = s.openImages(); err != nil {
			return err
		}
		var unpack func(done, total int64)
		if progress != nil {
			unpack = func(done, total int64) { progress("importing", done, total) }
		}
		img, err = st.Import(c.Context, file, name, unpack)
		err = storeError(err)
	} else {
		img, err = s.importIntoDaemon(c.Context, bd, file, name, progress)
		if !errors.Is(err, sandbox.ErrInvalid) && !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrUnavailable) && !errors.Is(err, sandbox.ErrInternal) {
			err = storeError(err) // from the staging store
		}
	}
	if progress != nil {
		fmt.Fprintln(c.App.ErrWriter)
	}
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, struct {
			Backend string `json:"backend"`
			*images.Image
		}{string(bd.Name), img})
	}
	fmt.Fprintf(c.App.Writer, "imported %s into %s (%s, %d bytes)\n", img.Name, bd.Name, img.Digest, img.Size)
	return nil
}

func imagesBuildCommand() *cli.Command {
	return &cli.Command{
		Name:  "build",
		Usage: "build an image from busybox-static plus chosen host programs, and import it",
		Description: `Writes a root filesystem of the host's static busybox (--busybox; sh, env, cat, ls,
id, sleep and the other common applets, an /etc naming root and nobody, /tmp) plus each
program named by --add, looked up in PATH and stored as /bin/NAME with the shared
libraries ldd lists for it, and imports it as --name into --backend like images import.
With --output FILE it writes that root-filesystem tarball to FILE instead (a new file, not
one that exists), for images import on this or another machine; --name then also imports it.
Nothing is downloaded: it needs busybox-static (apt-get install busybox-static).

Examples:
   dsh-sandbox images build --name tools:1 --add bash --add jq
   dsh-sandbox images build --output tools.tar --add bash
   dsh-sandbox images import --name tools:1 --backend docker tools.tar
   dsh-sandbox images build --name tools:1 --add bash --backend containerd
   dsh-sandbox exec --image tools:1 -- 'jq --version'`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "image `NAME[:TAG]` to import as ([REGISTRY/][NAMESPACE/]REPOSITORY[:TAG]); required unless --output"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the root-filesystem tarball to `FILE` (a new file) instead of importing it"},
			&cli.StringSliceFlag{Name: "add", Usage: "host `PROGRAM` to add (a command name looked up in PATH; repeatable)"},
			&cli.StringFlag{Name: "busybox", Value: images.DefaultBusyboxPath, Usage: "`PATH` of a statically linked busybox"},
			backendFlag("backend to import into"),
			jsonFlag,
		}, daemonFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usageError("images build takes no arguments, got %d", c.NArg())
			}
			if _, err := imageBackend(c); err != nil {
				return err
			}
			output, name := c.String("output"), c.String("name")
			if output == "" && name == "" {
				return usageError("--name: required (or --output FILE to write the tarball)")
			}
			if name != "" {
				if _, err := imageName("--name", name); err != nil {
					return err
				}
			}
			if output != "" {
				if _, err := os.Lstat(output); err == nil {
					return usageError("--output: %s exists; name a new file", output)
				} else if !errors.Is(err, fs.ErrNotExist) {
					return usageError("--output: %v", err)
				}
			}
			for _, p := range c.StringSlice("add") {
				if p == "" || strings.Contains(p, "/") {
					return usageError("--add: %q: want a command name found in PATH, not a path", p)
				}
			}
			file, cleanup, err := buildRootfs(c.String("busybox"), c.StringSlice("add"))
			if err != nil {
				return err
			}
			defer cleanup()
			if output != "" {
				if err := writeOutput(c, file, output); err != nil {
					return err
				}
				if name == "" {
					return nil
				}
			}
			return importImage(c, file)
		},
	}
}

// buildRootfs writes busybox plus the host programs add as a
// root-filesystem tarball in a temporary file, removed by cleanup.
func buildRootfs(busybox string, add []string) (file string, cleanup func(), err error) {
	f, err := os.CreateTemp("", "dsh-sandbox-build-*.tar")
	if err != nil {
		return "", nil, sandbox.Errorf(sandbox.ErrUnavailable, "images build: %v", err)
	}
	cleanup = func() { os.Remove(f.Name()) }
	var base bytes.Buffer
	if err := images.BusyboxRootfsTar(&base, busybox); err != nil {
		f.Close()
		cleanup()
		return "", nil, sandbox.Errorf(sandbox.ErrNotFound, "--busybox: %v (apt-get install busybox-static)", err)
	}
	err = images.AddHostBinaries(f, &base, add...)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return "", nil, sandbox.Errorf(sandbox.ErrNotFound, "--add: %v", err)
	}
	return f.Name(), cleanup, nil
}

// writeOutput copies the built tarball file to output, a file that must
// not exist yet, and reports it (as JSON with --json).
func writeOutput(c *cli.Context, file, output string) error {
	src, err := os.Open(file)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrUnavailable, "images build: %v", err)
	}
	defer src.Close()
	dst, err := os.OpenFile(output, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return usageError("--output: %v", err)
	}
	n, err := io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(output)
		return sandbox.Errorf(sandbox.ErrUnavailable, "--output: %v", err)
	}
	if c.Bool("json") && c.String("name") == "" {
		return writeJSON(c.App.Writer, struct {
			Output string `json:"output"`
			Size   int64  `json:"size"`
		}{output, n})
	}
	if !c.Bool("json") {
		fmt.Fprintf(c.App.Writer, "wrote %s (%d bytes)\n", output, n)
	}
	return nil
}

func imagesRemoveCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "remove an image from a backend",
		ArgsUsage: "NAME",
		Description: `Removes the image NAME (any spelling: "bb2" is "bb2:latest"; also a pulled
NAME@sha256:…) from the local store (--backend oci, the default) or from what dsh-sandbox
imported or pulled into the Docker engine or containerd's namespace (--backend docker,
containerd). Images dsh-sandbox did not import or pull are left alone. An image a running call uses is refused (exit 125): on oci, one whose
root filesystem a container has mounted; on docker and containerd, one a container uses.

Examples:
   dsh-sandbox images rm bb2
   dsh-sandbox images rm --backend containerd --json myorg/tools:1`,
		Flags: append([]cli.Flag{
			backendFlag("backend to remove the image from"),
			jsonFlag,
		}, daemonFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError("images rm takes one NAME, got %d arguments", c.NArg())
			}
			bd, err := imageBackend(c)
			if err != nil {
				return err
			}
			name, err := imageName("NAME", c.Args().First())
			if err != nil && strings.Contains(c.Args().First(), "@") {
				// Images pulled by digest are named by it.
				if name, err = images.CanonicalReference(c.Args().First()); err != nil {
					err = usageError("NAME: %v", err)
				}
			}
			if err != nil {
				return err
			}
			s, err := loadSettings(c)
			if err != nil {
				return err
			}
			if bd.Images == backend.ImagesLocal {
				st, err := s.openImages()
				if err != nil {
					return err
				}
				if err := storeError(st.Remove(name)); err != nil {
					return err
				}
			} else {
				st, closeSt, err := s.openImageStore(c.Context, bd)
				if err != nil {
					return err
				}
				defer closeSt()
				if name, err = st.RemoveImage(c.Context, name); err != nil {
					return err
				}
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, struct {
					Backend string `json:"backend"`
					Name    string `json:"name"`
					Removed bool   `json:"removed"`
				}{string(bd.Name), name, true})
			}
			fmt.Fprintf(c.App.Writer, "removed %s from %s\n", name, bd.Name)
			return nil
		},
	}
}

// progressBar returns a progress callback drawing on w when w is a
// terminal, else nil. Each phase ("unpacking", "loading") gets its own
// line.
func progressBar(w io.Writer) func(phase string, done, total int64) {
	f, ok := w.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return nil
	}
	last := ""
	return func(phase string, done, total int64) {
		if last != "" && phase != last {
			fmt.Fprintln(w)
		}
		last = phase
		fmt.Fprint(w, progressLine(phase, done, total))
	}
}

// progressLine is one state of the progress bar, starting with a
// carriage return.
func progressLine(phase string, done, total int64) string {
	const width = 30
	if total <= 0 {
		return fmt.Sprintf("\r%s: %d bytes", phase, done)
	}
	done = min(max(done, 0), total)
	n := int(done * width / total)
	return fmt.Sprintf("\r%s: [%-*s] %3d%%", phase, width, strings.Repeat("#", n), done*100/total)
}
