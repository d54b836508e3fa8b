package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/images"
)

func imagesCommand() *cli.Command {
	return &cli.Command{
		Name:  "images",
		Usage: "manage local images for the backends (no registry is contacted)",
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

Examples:
   dsh-sandbox images import --name busybox:1 busybox.tar
   dsh-sandbox images import --name busybox:1 --backend docker busybox.tar
   dsh-sandbox exec --backend docker --image busybox:1 -- id`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Required: true, Usage: "image `NAME[:TAG]`"},
					&cli.StringFlag{Name: "backend", Value: "oci", Usage: "backend to import into: oci, docker or containerd"},
					jsonFlag,
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usageError("images import takes one FILE, got %d arguments", c.NArg())
					}
					backend := c.String("backend")
					switch backend {
					case "oci", "docker", "containerd":
					default:
						return usageError("--backend: %q is not a backend that takes images (oci, docker or containerd)", backend)
					}
					s, err := loadSettings(c)
					if err != nil {
						return err
					}
					progress := progressBar(c.App.ErrWriter)
					var img *images.Image
					if backend == "oci" {
						var st *images.Store
						if st, err = s.openImages(); err != nil {
							return err
						}
						var unpack func(done, total int64)
						if progress != nil {
							unpack = func(done, total int64) { progress("importing", done, total) }
						}
						img, err = st.Import(c.Context, c.Args().First(), c.String("name"), unpack)
					} else {
						img, err = s.importIntoDaemon(c.Context, backend, c.Args().First(), c.String("name"), progress)
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
						}{backend, img})
					}
					fmt.Fprintf(c.App.Writer, "imported %s into %s (%s, %d bytes)\n", img.Name, backend, img.Digest, img.Size)
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list the images a backend has (oci: the local store, where host is always there)",
				Description: `Lists the images of the local store (--backend oci, the default; the generated host
image is always there), or the images dsh-sandbox imported into the Docker engine or into
containerd's namespace (--backend docker, containerd).

Examples:
   dsh-sandbox images list
   dsh-sandbox images list --backend containerd --json`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "backend", Value: "oci", Usage: "backend whose images to list: oci, docker or containerd"},
					jsonFlag,
				},
				Action: func(c *cli.Context) error {
					backend := c.String("backend")
					switch backend {
					case "oci", "docker", "containerd":
					default:
						return usageError("--backend: %q is not a backend with images (oci, docker or containerd)", backend)
					}
					s, err := loadSettings(c)
					if err != nil {
						return err
					}
					imgs, err := s.listImages(c.Context, backend)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						if imgs == nil {
							imgs = []images.Image{}
						}
						return writeJSON(c.App.Writer, imgs)
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tDIGEST\tSIZE\tIMPORTED")
					if backend == "oci" {
						fmt.Fprintln(tw, "host\t-\t-\t-")
					}
					for _, img := range imgs {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", img.Name, img.Digest, img.Size, img.Imported.Format("2006-01-02 15:04"))
					}
					return tw.Flush()
				},
			},
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
