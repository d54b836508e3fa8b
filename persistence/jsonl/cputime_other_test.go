//go:build !unix

package jsonl

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
