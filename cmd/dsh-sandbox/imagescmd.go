package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"
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
				Description: `Unpacks FILE into the local image store under --data-dir. Path traversal, links that
leave the root filesystem and device nodes are refused. Shows progress on a terminal.

Example:
   dsh-sandbox images import busybox.tar --name busybox:1`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Required: true, Usage: "image `NAME[:TAG]`"},
					&cli.StringFlag{Name: "backend", Value: "oci", Usage: "backend to import into: oci"},
					jsonFlag,
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return usageError("images import takes one FILE, got %d arguments", c.NArg())
					}
					if b := c.String("backend"); b != "oci" {
						return usageError("--backend: %q is not available in this build (oci only)", b)
					}
					s, err := loadSettings(c)
					if err != nil {
						return err
					}
					st, err := s.openImages()
					if err != nil {
						return err
					}
					progress := progressBar(c.App.ErrWriter)
					img, err := st.Import(c.Context, c.Args().First(), c.String("name"), progress)
					if progress != nil {
						fmt.Fprintln(c.App.ErrWriter)
					}
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, img)
					}
					fmt.Fprintf(c.App.Writer, "imported %s (%s, %d bytes)\n", img.Name, img.Digest, img.Size)
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list local images (host is always there)",
				Flags: []cli.Flag{jsonFlag},
				Action: func(c *cli.Context) error {
					s, err := loadSettings(c)
					if err != nil {
						return err
					}
					st, err := s.openImages()
					if err != nil {
						return err
					}
					imgs, err := st.List()
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, imgs)
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tDIGEST\tSIZE\tIMPORTED")
					fmt.Fprintln(tw, "host\t-\t-\t-")
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
// terminal, else nil.
func progressBar(w io.Writer) func(done, total int64) {
	f, ok := w.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return nil
	}
	return func(done, total int64) {
		const width = 30
		if total <= 0 {
			fmt.Fprintf(w, "\rimporting: %d bytes", done)
			return
		}
		n := int(done * width / total)
		fmt.Fprintf(w, "\rimporting: [%-*s] %3d%%", width, strings.Repeat("#", n), done*100/total)
	}
}
