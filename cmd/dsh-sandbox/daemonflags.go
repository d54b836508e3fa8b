package main

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// daemonFlags are the addresses of the daemons of the docker and
// containerd backends. They are flags of the commands that open those
// backends or their images (exec, hooks run, mcp, serve, reap, doctor,
// bench and the images subcommands), not global flags: a command that
// opens no daemon does not take them. Like the global flags they have a
// DSH_SANDBOX_* variable, and the --config file may set them at its top
// level (for every command that takes them) or in a command's section.
func daemonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "docker-host", Usage: "Docker engine `ADDR` for the docker backend (default: $DOCKER_HOST, else unix:///var/run/docker.sock)", EnvVars: envVar("docker-host")},
		&cli.StringFlag{Name: "containerd-address", Value: "/run/containerd/containerd.sock", Usage: "containerd socket `PATH` for the containerd backend", EnvVars: envVar("containerd-address")},
		&cli.StringFlag{Name: "containerd-namespace", Value: "dsh-sandbox", Usage: "containerd `NAMESPACE` of the containerd backend's images, containers and snapshots", EnvVars: envVar("containerd-namespace")},
	}
}

// takesFlag reports whether command c defines the flag name itself.
func takesFlag(c *cli.Command, name string) bool {
	return c != nil && slices.ContainsFunc(c.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), name) })
}

// readDaemons sets the daemon addresses from the daemon flags of c's
// command; a command that does not take them leaves s.daemons false, and
// backendConfig then refuses to open a backend that needs them, rather
// than reach a daemon the operator did not name.
func (s *settings) readDaemons(c *cli.Context) error {
	if !takesFlag(c.Command, "docker-host") {
		return nil
	}
	s.daemons = true
	s.dockerHost = c.String("docker-host")
	var err error
	if s.containerdAddress, err = absFlag("containerd-address", c.String("containerd-address")); err != nil {
		return err
	}
	s.containerdNamespace = c.String("containerd-namespace")
	return nil
}

// undefinedFlag is how the flag library words a flag the command does
// not define (the standard library's flag package).
const undefinedFlag = "flag provided but not defined: -"

// flagHint is the message of err, a flag error of app's command line,
// with a hint when the flag is a daemon flag given where it is not one:
// before the command name (where it was a global flag once) or after a
// command that opens no daemon. The hint names the commands that take it.
func flagHint(app *cli.App, err error) string {
	msg := err.Error()
	name, ok := strings.CutPrefix(msg, undefinedFlag)
	if !ok {
		return msg
	}
	name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
	if !slices.ContainsFunc(daemonFlags(), func(f cli.Flag) bool { return f.Names()[0] == name }) {
		return msg
	}
	return msg + " (--" + name + " is a flag of the commands that use the daemons, given after the command name: " + strings.Join(commandsTaking(app.Commands, name), ", ") + ")"
}

// commandsTaking lists the commands under cmds that define the flag name
// themselves, each by its path ("images list"), in the order of cmds.
func commandsTaking(cmds []*cli.Command, name string) []string {
	var takers []string
	for _, c := range cmds {
		if takesFlag(c, name) {
			takers = append(takers, c.Name)
		}
		for _, sub := range commandsTaking(c.Subcommands, name) {
			takers = append(takers, c.Name+" "+sub)
		}
	}
	return takers
}
