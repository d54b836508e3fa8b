package logbridge

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fixedTime stamps both loggers' events alike.
func fixedTime(t *testing.T) {
	old := zerolog.TimestampFunc
	zerolog.TimestampFunc = func() time.Time { return time.Date(2026, 12, 2, 14, 5, 6, 0, time.UTC) }
	t.Cleanup(func() { zerolog.TimestampFunc = old })
}

// TestHandlerCase checks each case's slog call against the zerolog
// event the library wrote before it used slog, through the JSON and the
// console writer, at the CLI's default level (warn) and at debug.
func TestHandlerCase(t *testing.T) {
	fixedTime(t)
	boom := errors.New("boom")
	var nilErr error
	cases := []struct {
		name string
		zero func(zerolog.Logger)
		slog func(*slog.Logger)
	}{
		{"plain", func(l zerolog.Logger) { l.Warn().Msg("output did not end") }, func(l *slog.Logger) { l.Warn("output did not end") }},
		{"empty message", func(l zerolog.Logger) { l.Info().Str("a", "b").Send() }, func(l *slog.Logger) { l.Info("", "a", "b") }},
		{"strings", func(l zerolog.Logger) {
			l.Debug().Str("signal", "SIGTERM").Str("quote", `a "b"`+"\n").Msg("stopping container")
		},
			func(l *slog.Logger) { l.Debug("stopping container", "signal", "SIGTERM", "quote", `a "b"`+"\n") }},
		{"ints", func(l zerolog.Logger) {
			l.Warn().Int("processes", 3).Int64("status", -1).Uint64("port", 443).Msg("killed")
		},
			func(l *slog.Logger) {
				l.Warn("killed", "processes", 3, slog.Int64("status", -1), slog.Uint64("port", 443))
			}},
		{"durations", func(l zerolog.Logger) {
			l.Debug().Dur("run", 1500*time.Microsecond).Dur("teardown", 2*time.Second).Msg("call finished")
		},
			func(l *slog.Logger) {
				l.Debug("call finished", "run", 1500*time.Microsecond, slog.Duration("teardown", 2*time.Second))
			}},
		{"errors", func(l zerolog.Logger) { l.Error().Err(boom).Str("pod", "p").Msg("not deleted") },
			func(l *slog.Logger) { l.Error("not deleted", "error", boom, "pod", "p") }},
		{"nil errors", func(l zerolog.Logger) {
			l.Warn().AnErr("stdout", nilErr).AnErr("stderr", boom).Msg("spill file incomplete")
		},
			func(l *slog.Logger) { l.Warn("spill file incomplete", "stdout", nilErr, "stderr", boom) }},
		{"bools", func(l zerolog.Logger) { l.Info().Bool("keyed", true).Bool("inherited", false).Msg("opened") },
			func(l *slog.Logger) { l.Info("opened", "keyed", true, slog.Bool("inherited", false)) }},
		{"context", func(l zerolog.Logger) {
			cl := l.With().Str("backend", "oci").Str("call", "c1").Logger()
			cl.Error().Err(boom).Int("n", 2).Msg("teardown left objects behind")
		}, func(l *slog.Logger) {
			l.With("backend", "oci").With(slog.String("call", "c1")).Error("teardown left objects behind", "error", boom, "n", 2)
		}},
		{"strs and groups", func(l zerolog.Logger) { l.Warn().Strs("signers", []string{"a", "b"}).Str("g.k", "v").Msg("m") },
			func(l *slog.Logger) { l.Warn("m", "signers", []string{"a", "b"}, slog.Group("g", "k", "v")) }},
	}
	writers := []struct {
		name string
		new  func(*bytes.Buffer) zerolog.Logger
	}{
		{"json", func(b *bytes.Buffer) zerolog.Logger { return zerolog.New(b) }},
		{"console", func(b *bytes.Buffer) zerolog.Logger { return zerolog.New(zerolog.ConsoleWriter{Out: b, NoColor: true}) }},
	}
	for _, w := range writers {
		for _, lvl := range []zerolog.Level{zerolog.WarnLevel, zerolog.DebugLevel} {
			for _, c := range cases {
				var want, got bytes.Buffer
				c.zero(w.new(&want).Level(lvl).With().Timestamp().Logger())
				c.slog(New(w.new(&got).Level(lvl).With().Timestamp().Logger()))
				if got.String() != want.String() {
					t.Errorf("%s, %s, level %s: slog wrote\n%q\nwant (zerolog)\n%q", c.name, w.name, lvl, got.String(), want.String())
				}
			}
		}
	}
}

func TestHandlerEnabled(t *testing.T) {
	h := NewHandler(zerolog.New(&bytes.Buffer{}).Level(zerolog.InfoLevel))
	for _, c := range []struct {
		level slog.Level
		want  bool
	}{{slog.LevelDebug, false}, {slog.LevelInfo, true}, {slog.LevelWarn, true}, {slog.LevelError + 4, true}} {
		if got := h.Enabled(t.Context(), c.level); got != c.want {
			t.Errorf("Enabled(%s) = %v, want %v", c.level, got, c.want)
		}
	}
	if NewHandler(zerolog.Nop()).Enabled(t.Context(), slog.LevelError) {
		t.Errorf("Enabled(ERROR) of zerolog.Nop() = true, want false")
	}
}

// TestZeroLogger: the zero zerolog.Logger, which logs nothing, logs
// nothing through the handler either, and does not panic.
func TestZeroLogger(t *testing.T) {
	New(zerolog.Logger{}).With("a", "b").Error("m", "error", errors.New("x"))
}
