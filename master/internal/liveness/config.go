package liveness

import (
	"fmt"
	"time"

	"github.com/shardfence/shardfence/internal/defaults"
	"github.com/shardfence/shardfence/internal/ident"
)

// Config are the liveness TTLs and the monitor's pace.
type Config struct {
	// ActiveTTL: an Active client with no liveness signal for this long
	// becomes Suspected (client_active_ttl_sec, default 10 s).
	ActiveTTL time.Duration
	// SuspicionTTL: a Suspected client becomes Offline this long after
	// the master committed it Suspected (client_suspicion_ttl_sec,
	// default 20 s).
	SuspicionTTL time.Duration
	// MonitorInterval is how often the monitor judges the records.
	// Default: a tenth of the shorter TTL, within 10 ms..1 s.
	MonitorInterval time.Duration
	// StallAfter: a gap this long between two monitor passes means the
	// monitor itself was not observing (the process was paused, starved
	// or its clock stopped); the gap is not counted against any client.
	// Default three monitor intervals.
	StallAfter time.Duration
}

// Default liveness TTLs (the seed's client_active_ttl_sec and
// client_suspicion_ttl_sec).
const (
	DefaultActiveTTL    = 10 * time.Second
	DefaultSuspicionTTL = 20 * time.Second
)

// WithDefaults fills every unset field.
func (c Config) WithDefaults() Config {
	defaults.Zero(&c.ActiveTTL, DefaultActiveTTL)
	defaults.Zero(&c.SuspicionTTL, DefaultSuspicionTTL)
	defaults.Zero(&c.MonitorInterval, min(max(min(c.ActiveTTL, c.SuspicionTTL)/10, 10*time.Millisecond), time.Second))
	defaults.Zero(&c.StallAfter, 3*c.MonitorInterval)
	return c
}

// Bounds of Config.MonitorInterval.
const (
	MinMonitorInterval = 10 * time.Millisecond
	MaxMonitorInterval = time.Second
)

// Validate refuses, with ident.ErrInvalidArgument, a configuration (with
// its defaults filled) the monitor cannot run.
func (c Config) Validate() error {
	switch {
	case c.ActiveTTL < 10*time.Millisecond || c.ActiveTTL > 24*time.Hour:
		return fmt.Errorf("%w: client active TTL %v is outside 10ms..24h", ident.ErrInvalidArgument, c.ActiveTTL)
	case c.SuspicionTTL < 10*time.Millisecond || c.SuspicionTTL > 24*time.Hour:
		return fmt.Errorf("%w: client suspicion TTL %v is outside 10ms..24h", ident.ErrInvalidArgument, c.SuspicionTTL)
	case c.MonitorInterval < MinMonitorInterval || c.MonitorInterval > MaxMonitorInterval:
		// Faster only burns a core (1ns was accepted); slower judges
		// clients late.
		return fmt.Errorf("%w: liveness monitor interval %v is outside %v..%v", ident.ErrInvalidArgument, c.MonitorInterval, MinMonitorInterval, MaxMonitorInterval)
	case c.MonitorInterval > c.ActiveTTL:
		return fmt.Errorf("%w: liveness monitor interval %v must be at most the active TTL %v", ident.ErrInvalidArgument, c.MonitorInterval, c.ActiveTTL)
	case c.StallAfter <= c.MonitorInterval:
		return fmt.Errorf("%w: liveness stall threshold %v must exceed the monitor interval %v", ident.ErrInvalidArgument, c.StallAfter, c.MonitorInterval)
	}
	return nil
}

// TTLFlags are the TTL settings as an operator gave them: nil means not
// given.
type TTLFlags struct {
	Active    *time.Duration // client_active_ttl_sec, --client-active-ttl
	Legacy    *time.Duration // client_live_ttl_sec, --client_ttl (deprecated aliases of Active)
	Suspicion *time.Duration // client_suspicion_ttl_sec, --client-suspicion-ttl
}

// ResolveTTLs applies the compatibility rules: the active TTL is the
// explicit one, else the deprecated alias, else 10 s; the suspicion TTL is
// the explicit one, else, when an active or legacy TTL was given, the
// resolved active TTL (so an operator who only ever set
// client_live_ttl_sec keeps a window close to the one they chose), else
// 20 s. warnings say what the operator should change.
func ResolveTTLs(f TTLFlags) (active, suspicion time.Duration, warnings []string) {
	active = DefaultActiveTTL
	switch {
	case f.Active != nil:
		active = *f.Active
		if f.Legacy != nil && *f.Legacy != *f.Active {
			warnings = append(warnings, fmt.Sprintf("the deprecated client_live_ttl_sec/--client_ttl (%v) is ignored: client_active_ttl_sec (%v) is set", *f.Legacy, *f.Active))
		}
	case f.Legacy != nil:
		active = *f.Legacy
		warnings = append(warnings, "client_live_ttl_sec/--client_ttl is deprecated: use client_active_ttl_sec (--client-active-ttl)")
	}
	switch {
	case f.Suspicion != nil:
		suspicion = *f.Suspicion
	case f.Active != nil || f.Legacy != nil:
		suspicion = active
	default:
		suspicion = DefaultSuspicionTTL
	}
	return active, suspicion, warnings
}
