package main

import (
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
)

// TestPoolRefillDelay: --pool-refill-delay reaches the pool's options (0
// meaning at once), and a negative one is refused naming the flag.
func TestPoolRefillDelay(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, pool.DefaultRefillDelay},
		{[]string{"--pool-refill-delay", "200ms"}, 200 * time.Millisecond},
		{[]string{"--pool-refill-delay", "0"}, -1},
	} {
		var got *pool.Options
		var gotErr error
		code, errOut := probe(t, []string{"serve"}, func(c *cli.Context) {
			got, gotErr = poolOptions(c, nil)
		}, append([]string{"serve"}, tc.args...)...)
		if code != 0 || gotErr != nil || got == nil {
			t.Fatalf("%v: exit %d, %q, poolOptions error %v", tc.args, code, errOut, gotErr)
		}
		if got.RefillDelay != tc.want {
			t.Errorf("%v: RefillDelay %v, want %v", tc.args, got.RefillDelay, tc.want)
		}
	}
	var gotErr error
	probe(t, []string{"serve"}, func(c *cli.Context) {
		_, gotErr = poolOptions(c, nil)
	}, "serve", "--pool-refill-delay", "-1s")
	if gotErr == nil || !strings.Contains(gotErr.Error(), "--pool-refill-delay") || exitCode(gotErr) != 2 {
		t.Errorf("--pool-refill-delay -1s: error %v (exit %d), want a usage error naming the flag", gotErr, exitCode(gotErr))
	}
}
