// Package logbridge lets the library packages, which log through the
// standard log/slog, write into the zerolog logger of the command-line
// and the service: [New] wraps a zerolog.Logger in a *slog.Logger whose
// records come out exactly as the same event logged with zerolog would
// (level names, field names and order, message, timestamp).
//
// Only the top of the program imports it (cmd/dsh-sandbox); the sandbox
// packages and egress never link zerolog.
package logbridge
