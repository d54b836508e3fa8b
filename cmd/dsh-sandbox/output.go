package main

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/urfave/cli/v2"
)

// jsonFlag is the --json flag every command that prints data has.
var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}

// writeJSON writes v as one compact line without HTML escaping.
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}
