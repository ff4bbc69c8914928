package main

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"time"
)

// The small pieces of flag handling several commands share.

// envOr is the environment variable SHARDFENCE_name, or def when it is
// unset or empty: the default of a flag the environment may set.
func envOr(name, def string) string {
	if v := os.Getenv(envPrefix + name); v != "" {
		return v
	}
	return def
}

// addLatencyFlag adds --latency, the delay the in-memory benchmarks add
// to every store request.
func addLatencyFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("latency", 10*time.Millisecond, "delay added to every store request (one injected round trip)")
}

// parseCounts parses a comma-separated list of counts, each within
// lo..hi (hi 0: no upper bound); ok is false if any is not.
func parseCounts(s string, lo, hi int) (counts []int, ok bool) {
	for _, v := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < lo || (hi > 0 && n > hi) {
			return nil, false
		}
		counts = append(counts, n)
	}
	return counts, true
}

// listItems are the items of a comma-separated list as given, the blank
// ones left out.
func listItems(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if strings.TrimSpace(v) != "" {
			out = append(out, v)
		}
	}
	return out
}
