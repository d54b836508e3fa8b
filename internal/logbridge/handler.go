package logbridge

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rs/zerolog"
)

// New returns a logger whose records zl writes; see [Handler].
func New(zl zerolog.Logger) *slog.Logger { return slog.New(NewHandler(zl)) }

// Handler is an slog.Handler that writes each record as one zerolog
// event of zl:
//
//   - slog.LevelDebug and below are zerolog's debug (below debug: trace),
//     Info info, Warn warn, Error and above error; a level zl (or
//     zerolog's global level) does not log is not enabled;
//   - the attributes of WithAttrs are zl's context fields, those of the
//     record the event's fields, in their order, so they come out where
//     zerolog puts context and event fields;
//   - strings, integers, floats, bools, durations (zerolog's Dur: its
//     DurationFieldUnit) and times are zerolog's fields of that kind; an
//     error is zerolog's AnErr (a nil error or nil value adds no field,
//     as zerolog's Err(nil)); a []string is Strs, a fmt.Stringer its
//     String; anything else is Interface (JSON);
//   - a group's attributes get keys "group.key";
//   - the record's time and source are not used: zl's own timestamp
//     hook, if any, stamps the event as it would a zerolog event.
//
// A Handler is safe for concurrent use as far as zl's writer is.
type Handler struct {
	zl     zerolog.Logger
	prefix string // the open groups, each followed by "."
}

// NewHandler returns the handler writing into zl.
func NewHandler(zl zerolog.Logger) *Handler { return &Handler{zl: zl} }

// level is zerolog's level of the slog level l.
func level(l slog.Level) zerolog.Level {
	switch {
	case l < slog.LevelDebug:
		return zerolog.TraceLevel
	case l < slog.LevelInfo:
		return zerolog.DebugLevel
	case l < slog.LevelWarn:
		return zerolog.InfoLevel
	case l < slog.LevelError:
		return zerolog.WarnLevel
	}
	return zerolog.ErrorLevel
}

// Enabled reports whether zl logs events of level l.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool {
	zl := level(l)
	return h.zl.GetLevel() != zerolog.Disabled && zl >= h.zl.GetLevel() && zl >= zerolog.GlobalLevel()
}

// Handle writes r as one zerolog event.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	e := h.zl.WithLevel(level(r.Level))
	if e == nil {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		e = add(e, h.prefix, a)
		return true
	})
	e.Msg(r.Message)
	return nil
}

// WithAttrs returns a handler whose zerolog logger has attrs as context
// fields.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	c := h.zl.With()
	for _, a := range attrs {
		c = add(c, h.prefix, a)
	}
	return &Handler{zl: c.Logger(), prefix: h.prefix}
}

// WithGroup returns a handler that prefixes the keys of later attributes
// with name and ".".
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &Handler{zl: h.zl, prefix: h.prefix + name + "."}
}

// fields are the field methods zerolog's *Event and Context share.
type fields[T any] interface {
	Str(key, val string) T
	Strs(key string, vals []string) T
	Int64(key string, i int64) T
	Uint64(key string, i uint64) T
	Float64(key string, f float64) T
	Bool(key string, b bool) T
	Dur(key string, d time.Duration) T
	Time(key string, t time.Time) T
	AnErr(key string, err error) T
	Interface(key string, i any) T
}

// add adds a to f under prefix as the field of a's kind.
func add[T fields[T]](f T, prefix string, a slog.Attr) T {
	v := a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return f
	}
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			f = add(f, p, g)
		}
		return f
	}
	key := prefix + a.Key
	switch v.Kind() {
	case slog.KindString:
		return f.Str(key, v.String())
	case slog.KindInt64:
		return f.Int64(key, v.Int64())
	case slog.KindUint64:
		return f.Uint64(key, v.Uint64())
	case slog.KindFloat64:
		return f.Float64(key, v.Float64())
	case slog.KindBool:
		return f.Bool(key, v.Bool())
	case slog.KindDuration:
		return f.Dur(key, v.Duration())
	case slog.KindTime:
		return f.Time(key, v.Time())
	}
	switch x := v.Any().(type) {
	case nil:
		return f // as zerolog's AnErr(key, nil)
	case error:
		return f.AnErr(key, x)
	case []string:
		return f.Strs(key, x)
	case fmt.Stringer:
		return f.Str(key, x.String())
	default:
		return f.Interface(key, x)
	}
}
