package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestErrorf(t *testing.T) {
	err := Errorf(ErrNotFound, "sandbox: image %q: %w", "alpine", fs.ErrNotExist)
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Errorf(ErrNotFound, … %%w fs.ErrNotExist) = %v: errors.Is class %v, wrapped %v, want both true",
			err, errors.Is(err, ErrNotFound), errors.Is(err, fs.ErrNotExist))
	}
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrInternal) {
		t.Errorf("Errorf(ErrNotFound, …) also matches another class")
	}
	if got, want := err.Error(), `sandbox: image "alpine": file does not exist`; got != want {
		t.Errorf("Errorf(…).Error() = %q, want %q", got, want)
	}
	two := Errorf(ErrUnavailable, "%w and %w", context.Canceled, fs.ErrPermission)
	if !errors.Is(two, ErrUnavailable) || !errors.Is(two, context.Canceled) || !errors.Is(two, fs.ErrPermission) {
		t.Errorf("Errorf with two %%w = %v, want all three to match", two)
	}
	if err := Errorf(nil, "x"); !errors.Is(err, ErrInternal) {
		t.Errorf("Errorf(nil, …) = %v, want ErrInternal", err)
	}
	wrapped := fmt.Errorf("oci: run: %w", Errorf(ErrInvalid, "bad"))
	if !errors.Is(wrapped, ErrInvalid) {
		t.Errorf("a wrapped class error lost its class")
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		res  *Result
		err  error
		want int
	}{
		{"success", &Result{ExitCode: exit(0)}, nil, 0},
		{"failure", &Result{ExitCode: exit(1)}, nil, 1},
		{"exit 42", &Result{ExitCode: exit(42)}, nil, 42},
		{"exit 255", &Result{ExitCode: exit(255)}, nil, 255},
		{"SIGKILL", &Result{Signal: "SIGKILL"}, nil, 137},
		{"SIGTERM", &Result{Signal: "SIGTERM"}, nil, 143},
		{"SIGSEGV", &Result{Signal: "SIGSEGV"}, nil, 139},
		{"SIGRTMIN+2", &Result{Signal: "SIGRTMIN+2"}, nil, 128 + 36},
		{"unknown signal", &Result{Signal: "SIGWHAT"}, nil, 125},
		{"timeout wins over signal", &Result{TimedOut: true, Signal: "SIGKILL"}, nil, 124},
		{"timeout wins over exit 0", &Result{TimedOut: true, ExitCode: exit(0)}, nil, 124},
		{"aborted by signal", &Result{Aborted: true, Signal: "SIGTERM"}, nil, 143},
		{"no code, no signal", &Result{}, nil, 125},
		{"nil result", nil, nil, 125},
		{"invalid", nil, Errorf(ErrInvalid, "timeoutMs -1"), 2},
		{"wrapped invalid", nil, fmt.Errorf("cli: %w", Errorf(ErrInvalid, "x")), 2},
		{"not found", nil, Errorf(ErrNotFound, "image"), 125},
		{"unavailable", nil, Errorf(ErrUnavailable, "runc"), 125},
		{"internal", nil, Errorf(ErrInternal, "bug"), 125},
		{"unclassified", nil, errors.New("mystery"), 125},
		{"error wins over result", &Result{ExitCode: exit(0)}, Errorf(ErrInternal, "teardown"), 125},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.res, tt.err); got != tt.want {
			t.Errorf("ExitCode(%s) = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func exit(n int) *int { return &n }
