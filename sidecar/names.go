package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"unicode"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/echo"
)

// MaxTerm is the highest term an Open accepts: 2^53-1, the largest integer
// every JSON reader keeps exact. Terms grow by one per failover, so it is
// never reached by use; the headroom above it keeps term arithmetic far
// from overflow and makes a mistyped huge term an error instead of a shard
// that can never fail over again.
const MaxTerm = 1<<53 - 1

// MaxNameLen bounds allocation ids, node names and handoff targets.
const MaxNameLen = 255

// echoLen bounds how much of a client's input an error or log line repeats.
const echoLen = echo.Len

// validateName checks an allocation id, node name or handoff target: at
// most MaxNameLen bytes, fence's rules (UTF-8, no '|', no C0 controls),
// and only printable characters: no C1 controls, bidi overrides or other
// format characters, which would make `status` and logs show something
// else than what is stored.
func validateName(what, s string, optional bool) error {
	if len(s) > MaxNameLen {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalidArgument, what, len(s), MaxNameLen)
	}
	if err := fence.ValidateID(what, s, optional); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	for i, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: %s %q has the unprintable character %U at byte %d (use printable characters)", ErrInvalidArgument, what, s, r, i)
		}
	}
	return nil
}

// clip returns at most echoLen bytes of s, cut at a character boundary and
// marked, with invalid UTF-8 replaced: what an error may repeat of a
// client's input.
func clip(s string) string {
	return clipN(s, echoLen)
}

func clipN(s string, n int) string { return echo.ClipN(s, n) }

// maxLogValue bounds one string in a log line.
const maxLogValue = 1024

// clipHandler bounds every string of a log record, so no client input
// (a name, an error quoting it) can make a log line large.
type clipHandler struct{ slog.Handler }

func (h clipHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, clipN(r.Message, maxLogValue), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(clipAttr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h clipHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := make([]slog.Attr, len(as))
	for i, a := range as {
		c[i] = clipAttr(a)
	}
	return clipHandler{h.Handler.WithAttrs(c)}
}

func (h clipHandler) WithGroup(name string) slog.Handler {
	return clipHandler{h.Handler.WithGroup(name)}
}

func clipAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(clipN(v.String(), maxLogValue))
	case slog.KindGroup:
		g := v.Group()
		c := make([]slog.Attr, len(g))
		for i, x := range g {
			c[i] = clipAttr(x)
		}
		a.Value = slog.GroupValue(c...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			a.Value = slog.StringValue(clipN(err.Error(), maxLogValue))
		}
	}
	return a
}

// clippedError bounds the message of an error sent to a client; errors.Is
// and errors.As still see the original.
type clippedError struct{ err error }

// maxErrorMessage bounds the message of an API error.
const maxErrorMessage = echo.MaxMessage

func (e clippedError) Error() string { return clipN(e.err.Error(), maxErrorMessage) }
func (e clippedError) Unwrap() error { return e.err }
