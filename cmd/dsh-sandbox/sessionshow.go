package main

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

func sessionCommand() *cli.Command {
	return &cli.Command{
		Name:  "session",
		Usage: "inspect dsh session logs",
		Subcommands: []*cli.Command{{
			Name:      "show",
			Usage:     "load a JSONL or zstd session log: header, event count, types, last turn",
			ArgsUsage: "FILE",
			Description: `Loads the whole log the way the store does (packed chunk rows expanded, a torn last
record dropped) and summarizes it.

Example:
   dsh-sandbox session show --json ~/.dsh/sessions/--srv-proj--/abc/session.jsonl`,
			Flags: []cli.Flag{jsonFlag},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usageError("session show takes exactly one FILE, got %d arguments", c.NArg())
				}
				log, err := jsonl.ReadFile(c.Args().First())
				if err != nil {
					return err
				}
				sum := summarize(log)
				if c.Bool("json") {
					return writeJSON(c.App.Writer, sum)
				}
				w := c.App.Writer
				hdr, err := sum.Header.MarshalJSON() // unlike json.Marshal, keeps < > & literal
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "header: %s\n", hdr)
				fmt.Fprintf(w, "events: %d\n", sum.Events)
				for _, g := range sum.Gaps {
					fmt.Fprintf(w, "seq gap: line %d jumps from seq %d to %d\n", g.Line, g.Want, g.Got)
				}
				if sum.LastTurn != nil {
					fmt.Fprintf(w, "last turn: %d\n", *sum.LastTurn)
				}
				fmt.Fprintln(w, "types:")
				for _, t := range sum.Types {
					fmt.Fprintf(w, "  %6d  %s\n", t.Count, t.Type)
				}
				return nil
			},
		}},
	}
}

type typeCount struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
}

type logSummary struct {
	Header   session.Header `json:"header"`
	Events   int            `json:"events"`
	Types    []typeCount    `json:"types"`
	LastTurn *int64         `json:"lastTurn"`
	// Gaps are forward jumps of seq in the stored log (events missing).
	Gaps []persistence.SeqGap `json:"seqGaps"`
}

func summarize(log *persistence.Log) logSummary {
	counts := map[string]int{}
	var last *int64
	for _, ev := range log.Events {
		counts[ev.Type]++
		var d struct {
			Turn *int64 `json:"turn"`
		}
		if json.Unmarshal(ev.Data, &d) == nil && d.Turn != nil {
			t := *d.Turn
			last = &t
		}
	}
	sum := logSummary{Header: log.Header, Events: len(log.Events), LastTurn: last, Gaps: log.Gaps}
	if sum.Gaps == nil {
		sum.Gaps = []persistence.SeqGap{}
	}
	for t, n := range counts {
		sum.Types = append(sum.Types, typeCount{t, n})
	}
	sort.Slice(sum.Types, func(i, j int) bool {
		if sum.Types[i].Count != sum.Types[j].Count {
			return sum.Types[i].Count > sum.Types[j].Count
		}
		return sum.Types[i].Type < sum.Types[j].Type
	})
	return sum
}
