package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/master"
)

// livenessFlags are the master's client liveness settings. The seed's
// names are accepted too: client_active_ttl_sec, client_suspicion_ttl_sec
// and the deprecated client_live_ttl_sec in the config file, and the
// deprecated --client_ttl (seconds) on the command line.
type livenessFlags struct {
	active, suspicion, legacy time.Duration
	legacySec                 int
	interval                  time.Duration
}

func (l *livenessFlags) add(fs *flag.FlagSet) {
	fs.DurationVar(&l.active, "client-active-ttl", master.DefaultClientActiveTTL, "an active client (or sidecar node) with no ping or mount for this long is suspected: it keeps its resources but takes no new work (client_active_ttl_sec)")
	fs.DurationVar(&l.suspicion, "client-suspicion-ttl", master.DefaultClientSuspicionTTL, "a suspected client goes offline this long after it was suspected, and is offboarded (client_suspicion_ttl_sec); when omitted and an active TTL is given, it is that TTL")
	fs.DurationVar(&l.legacy, "client-live-ttl", 0, "deprecated alias of --client-active-ttl (client_live_ttl_sec)")
	fs.IntVar(&l.legacySec, "client_ttl", 0, "deprecated alias of --client-active-ttl, in seconds")
	fs.DurationVar(&l.interval, "liveness-interval", 0, "how often the liveness monitor judges clients (default a tenth of the shorter TTL, 10ms..1s)")
}

// seedConfigAliases are the seed's config keys, in seconds.
var seedConfigAliases = map[string]configAlias{
	"client_active_ttl_sec":    secondsAlias("client-active-ttl"),
	"client_suspicion_ttl_sec": secondsAlias("client-suspicion-ttl"),
	"client_live_ttl_sec":      secondsAlias("client-live-ttl"),
}

func secondsAlias(flagName string) configAlias {
	return func(v any) (string, string) { return flagName, fmt.Sprintf("%vs", v) }
}

// resolve applies the compatibility rules (master.ResolveLivenessTTLs) to
// what was given, by flag, config file or alias.
func (l *livenessFlags) resolve(fs *flag.FlagSet, cfg *master.LivenessConfig) ([]string, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var in master.LivenessTTLFlags
	if given["client-active-ttl"] {
		in.Active = &l.active
	}
	if given["client-suspicion-ttl"] {
		in.Suspicion = &l.suspicion
	}
	switch {
	case given["client-live-ttl"] && given["client_ttl"] && l.legacy != time.Duration(l.legacySec)*time.Second:
		return nil, fmt.Errorf("%w: --client-live-ttl %v and --client_ttl %d disagree (both are deprecated: use --client-active-ttl)", errUsage, l.legacy, l.legacySec)
	case given["client-live-ttl"]:
		in.Legacy = &l.legacy
	case given["client_ttl"]:
		d := time.Duration(l.legacySec) * time.Second
		in.Legacy = &d
	}
	var warnings []string
	cfg.ActiveTTL, cfg.SuspicionTTL, warnings = master.ResolveLivenessTTLs(in)
	cfg.MonitorInterval = l.interval
	for _, c := range []struct {
		name string
		d    time.Duration
	}{{"client active TTL", cfg.ActiveTTL}, {"client suspicion TTL", cfg.SuspicionTTL}} {
		if c.d < 10*time.Millisecond || c.d > 24*time.Hour {
			return nil, fmt.Errorf("%w: %s %v is outside 10ms..24h", errUsage, c.name, c.d)
		}
	}
	if l.interval < 0 || l.interval > cfg.ActiveTTL {
		return nil, fmt.Errorf("%w: --liveness-interval %v must be within 0..the active TTL %v", errUsage, l.interval, cfg.ActiveTTL)
	}
	return warnings, nil
}
