package main

import (
	"os"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 200; i++ {
		ds = append(ds, time.Duration(i))
	}
	for p, want := range map[int]time.Duration{50: 100, 95: 190, 99: 198, 100: 200, 1: 2} {
		if got := percentile(ds, p); got != want {
			t.Errorf("percentile(1..200, %d) = %d, want %d", p, got, want)
		}
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("percentile of one sample = %d, want 7", got)
	}
}

func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
	}
	after, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time %v after 100 ms of spinning, %v before: want more", after, before)
	}
	if _, err := processCPU(1 << 30); err == nil {
		t.Error("processCPU of a pid that cannot exist = no error")
	}
}
