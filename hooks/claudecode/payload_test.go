package claudecode

import (
	"flag"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/hooks/hookstest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestPayload(t *testing.T) { hookstest.Payload(t, Dialect{}, *update) }
