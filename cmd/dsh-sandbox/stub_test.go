package main

import (
	"os"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

// TestMain puts a freshly built dsh-sandbox-stub on PATH, where the oci
// executors of the in-process commands find it (the test binary has none
// next to it).
func TestMain(m *testing.M) {
	os.Exit(fixtures.RunWithStub(m))
}
