package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// checkpointSuffix names an audit log's default checkpoint: FILE.checkpoint.
const checkpointSuffix = ".checkpoint"

func auditCommand() *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "inspect the service's audit log",
		Subcommands: []*cli.Command{{
			Name:      "verify",
			Usage:     "check the audit log's hash chain, MACs and checkpoint; exit 1 at the first failure",
			ArgsUsage: "[FILE]",
			Description: `Every record carries the sha256 of the line before it, so an edited, removed or
reordered line breaks the chain at the line after it. The checkpoint (the record count and
head hash serve rewrites after every record, FILE.checkpoint unless --checkpoint names
another) shows records cut off the end and a tail rewritten with a recomputed chain; the
log may hold one record more than its checkpoint, the one a crash between the two writes
leaves, and a torn last line (no newline, a crash mid-write) is reported, not counted. With --key (the --audit-key of serve) every record's and the checkpoint's HMAC is
checked too, so that only the key's holder could have written them. FILE defaults to
<data-dir>/audit.jsonl. Prints the record count and head hash it checked.

A rotated log (renamed, then SIGHUP) has no checkpoint of its own: check it with
--checkpoint none and compare its head with the "previousHead" serve logged.

Examples:
   dsh-sandbox audit verify
   dsh-sandbox audit verify --key /etc/dsh-sandbox/audit.key /var/lib/dsh-sandbox/audit.jsonl
   dsh-sandbox audit verify --checkpoint none /var/lib/dsh-sandbox/audit.jsonl.1`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "key", Usage: "the operator key `FILE` serve was given as --audit-key"},
				&cli.StringFlag{Name: "checkpoint", Usage: "checkpoint `FILE` (default FILE.checkpoint; \"none\" checks the chain alone)"},
				jsonFlag,
			},
			Action: auditVerify,
		}},
	}
}

func auditVerify(c *cli.Context) error {
	if c.NArg() > 1 {
		return usageError("audit verify takes at most one FILE")
	}
	path := c.Args().First()
	if path == "" {
		s, err := loadSettings(c)
		if err != nil {
			return err
		}
		path = filepath.Join(s.dataDir, "audit.jsonl")
	}
	var key []byte
	if k := c.String("key"); k != "" {
		var err error
		if key, err = api.ReadAuditKey(k); err != nil {
			return usageError("--key: %v", err)
		}
	}
	var cp *api.AuditCheckpoint
	cpPath := c.String("checkpoint")
	if cpPath == "" {
		cpPath = path + checkpointSuffix
	}
	if cpPath != "none" {
		got, err := api.ReadAuditCheckpoint(cpPath, key)
		if errors.Is(err, fs.ErrNotExist) {
			return sandbox.Errorf(sandbox.ErrNotFound, "%v (check the chain alone with --checkpoint none)", err)
		}
		if err != nil {
			return fmt.Errorf("audit log %s: %w", path, err)
		}
		cp = &got
	}
	f, err := os.Open(path)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrNotFound, "audit log: %v", err)
	}
	defer f.Close()
	check, verr := api.CheckAudit(f, key, cp)
	if c.Bool("json") {
		out := struct {
			Records     int    `json:"records"`
			Head        string `json:"head"`
			MACs        int    `json:"macs"`
			MACsChecked bool   `json:"macsChecked"`
			Checkpoint  string `json:"checkpoint,omitempty"`
			TornBytes   int    `json:"tornBytes"`
			OK          bool   `json:"ok"`
			Error       string `json:"error,omitempty"`
		}{Records: check.Records, Head: check.Head, MACs: check.MACs, MACsChecked: key != nil, TornBytes: check.TornBytes, OK: verr == nil}
		if cp != nil {
			out.Checkpoint = cpPath
		}
		if verr != nil {
			out.Error = verr.Error()
		}
		if err := writeJSON(c.App.Writer, out); err != nil {
			return err
		}
	} else if verr == nil {
		printAuditCheck(c.App.Writer, check, cp, cpPath, key != nil)
	}
	if verr != nil {
		return fmt.Errorf("audit log %s: %w", path, verr)
	}
	return nil
}

// printAuditCheck writes what a verified audit log holds for people:
// its records and head, a torn tail, the checkpoint at cpPath (cp nil:
// not checked) and the MACs (keyed: checked under --key).
func printAuditCheck(w io.Writer, check api.AuditCheck, cp *api.AuditCheckpoint, cpPath string, keyed bool) {
	fmt.Fprintf(w, "ok: %d records, head %s\n", check.Records, check.Head)
	if check.TornBytes > 0 {
		fmt.Fprintf(w, "torn: %d bytes without a newline follow record %d (a crash mid-write; serve cuts them at start)\n", check.TornBytes, check.Records)
	}
	switch {
	case cp == nil:
		fmt.Fprintln(w, "checkpoint: not checked (--checkpoint none)")
	case check.Records == cp.Records:
		fmt.Fprintf(w, "checkpoint: %s matches (%d records)\n", cpPath, cp.Records)
	default:
		fmt.Fprintf(w, "checkpoint: %s matches up to record %d; record %d was written but not checkpointed (a crash)\n", cpPath, cp.Records, check.Records)
	}
	switch {
	case keyed:
		fmt.Fprintf(w, "macs: %d records checked under --key\n", check.MACs)
	case check.MACs > 0:
		fmt.Fprintf(w, "macs: %d records carry one, not checked (no --key)\n", check.MACs)
	default:
		fmt.Fprintln(w, "macs: none (serve ran without --audit-key)")
	}
}

// serveAuditFiles are serve's audit log and checkpoint as absolute paths
// by name (none with --audit-log none), for checkDeployment and
// openAudit.
func serveAuditFiles(c *cli.Context, auditPath string) (map[string]string, error) {
	if auditPath == "none" {
		return map[string]string{}, nil
	}
	log, err := absFlag("audit-log", auditPath)
	if err != nil {
		return nil, err
	}
	cp := c.String("audit-checkpoint")
	if cp == "" {
		cp = log + checkpointSuffix
	}
	if cp, err = absFlag("audit-checkpoint", cp); err != nil {
		return nil, err
	}
	if cp == log {
		return nil, usageError("--audit-checkpoint: %s is the audit log itself", cp)
	}
	return map[string]string{"audit log": log, "audit checkpoint": cp}, nil
}

// openAudit opens serve's audit log (files from serveAuditFiles) with
// its checkpoint and the --audit-key, which must lie outside the data
// directory and the log's directory. It logs a torn last record it cut
// and a checkpoint it had to start.
func (s *settings) openAudit(c *cli.Context, files map[string]string) (*api.AuditLog, error) {
	log, cp := files["audit log"], files["audit checkpoint"]
	for _, p := range []string{log, cp} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "--audit-log: %v", err)
		}
	}
	o := api.AuditOptions{Checkpoint: cp}
	if k := c.String("audit-key"); k != "" {
		var err error
		o.Key, err = api.ReadAuditKey(k, safefile.Dir{What: "the data dir", Path: s.dataDir}, safefile.Dir{What: "the audit log's directory", Path: filepath.Dir(log)})
		if err != nil {
			return nil, usageError("--audit-key: %v", err)
		}
	}
	a, err := api.OpenAudit(log, o)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "--audit-log: %v", err)
	}
	st := a.Opened()
	if st.TornBytes > 0 {
		s.log.Warn().Str("path", log).Int("bytes", st.TornBytes).Int("records", st.Records).Str("head", st.Head).Msg("audit log: cut a torn last record (a crash mid-write); the log continues after the last whole record")
	}
	if st.CheckpointCreated {
		s.log.Warn().Str("path", cp).Int("records", st.Records).Str("head", st.Head).Msg("audit log: no checkpoint found; started one from the log as it is")
	}
	s.log.Info().Str("path", log).Int("records", st.Records).Str("head", st.Head).Bool("keyed", o.Key != nil).Msg("audit log opened")
	return a, nil
}
