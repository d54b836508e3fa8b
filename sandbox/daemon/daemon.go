// Package daemon classifies the errors of the daemons and engines that
// backends talk to (the Docker engine, containerd): whether the daemon
// could not be reached, an object is missing, or something else failed.
// It is apart from package driver so that a backend without a daemon
// links no daemon client.
package daemon

import (
	"context"
	"errors"
	"io"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Error is the one classifier of the errors a backend's daemon or
// engine returns: it wraps err with the message fmt.Sprintf(format,
// args...) + ": " + err and the class Class gives it. The message should
// start with the backend's name and name what failed.
func Error(err error, unreachable func(error) bool, format string, args ...any) error {
	return sandbox.Errorf(Class(err, unreachable), format+": %w", append(args, err)...)
}

// Class returns the class of err, an error of a daemon, an engine or its
// client: sandbox.ErrUnavailable when the daemon could not be reached or
// the call gave up (a refused or reset connection, a missing socket, an
// early end of the stream, a deadline or a cancellation, an errdefs or
// gRPC "unavailable", or unreachable(err) for a client's own connection
// errors; nil unreachable adds none), sandbox.ErrNotFound for a missing
// object (errdefs "not found", which the Docker client's errors match
// too), else sandbox.ErrInternal.
func Class(err error, unreachable func(error) bool) error {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		cerrdefs.IsUnavailable(err), cerrdefs.IsCanceled(err), cerrdefs.IsDeadlineExceeded(err),
		grpcstatus.Code(err) == codes.Unavailable,
		unreachable != nil && unreachable(err):
		return sandbox.ErrUnavailable
	case cerrdefs.IsNotFound(err):
		return sandbox.ErrNotFound
	}
	return sandbox.ErrInternal
}
