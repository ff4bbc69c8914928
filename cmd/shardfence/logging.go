package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// logFlags are --log-level and --log-format, shared by serve and master so
// both processes write one log format: JSON lines by default (for a log
// pipeline), text for a person at a terminal.
type logFlags struct {
	level, format string
}

func (l *logFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "json", "json (one JSON object a line, for log pipelines) or text (key=value, for a terminal)")
}

// The keys every line of both processes uses for the same things, so one
// query finds a shard, a term or a node in the sidecar's and the master's
// logs alike.
const (
	logKeyComponent = "component" // sidecar or master
	logKeyNode      = "node"      // --node (the master's defaults to the host name)
	logKeyShard     = "shard"
	logKeyTerm      = "term"
	logKeyError     = "error"
)

// logger makes the process's logger on w: the format and level of the
// flags, with the component and node on every line. The master's packages
// say "err" where the sidecar's say "error"; the handler writes both as
// "error". Durations are written as Go durations ("1.5s") in both formats,
// not JSON's nanoseconds.
func (l *logFlags) logger(w io.Writer, component, node string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q (debug, info, warn or error)", errUsage, l.level)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == "err" {
			a.Key = logKeyError
		}
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
	var h slog.Handler
	switch l.format {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	default:
		return nil, fmt.Errorf("%w: --log-format %q (json or text)", errUsage, l.format)
	}
	log := slog.New(h).With(logKeyComponent, component)
	if node != "" {
		log = log.With(logKeyNode, node)
	}
	return log, nil
}
