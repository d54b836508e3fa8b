package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func fieldErrorf(field, format string, args ...any) error {
	return &types.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func forbiddenf(field, format string, args ...any) error {
	return &types.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Forbidden: true}
}

// HTTPStatus is the one mapping from an error class to an HTTP status:
// sandbox.ErrInvalid → 400, sandbox.ErrNotFound → 404,
// sandbox.ErrUnavailable → 503, types.ErrUnauthorized → 401,
// types.ErrForbidden → 403, types.ErrOverloaded → 429,
// types.ErrMethodNotAllowed → 405, a body over the limit → 413, anything
// else → 500.
func HTTPStatus(err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, types.ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, types.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, types.ErrOverloaded):
		return http.StatusTooManyRequests
	case errors.Is(err, types.ErrMethodNotAllowed):
		return http.StatusMethodNotAllowed
	case errors.Is(err, sandbox.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, sandbox.ErrUnavailable):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}
