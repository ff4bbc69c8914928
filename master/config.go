package master

import (
	"fmt"
	"time"
)

// Config holds the master's policy knobs. The zero value of a field means its
// default (see withDefaults).
type Config struct {
	// DefaultLeaseTTL is the lease a read grants (default 10 s).
	DefaultLeaseTTL time.Duration
	// SoftPinTTL is how long a soft-pin-enabled object stays soft pinned
	// after a lease grant (default 30 min).
	SoftPinTTL time.Duration
	// RecoveryLeaseTTL is the lease a successful remount grants to every
	// object on the remounted segments; 0 means DefaultLeaseTTL. Operators
	// raise it when remounting very large segments leaves too little of the
	// lease visible after publication.
	RecoveryLeaseTTL time.Duration
	// HighWatermark is the used/capacity ratio above which eviction runs
	// (default 0.90).
	HighWatermark float64
	// EvictionRatio is how far below HighWatermark one eviction pass goes,
	// as a fraction of capacity (default 0.05).
	EvictionRatio float64
	// AllowEvictSoftPinned lets memory pressure evict soft-pinned objects
	// (after all others).
	AllowEvictSoftPinned bool
	// OffloadOnEvict asks the Offloader to copy an object from memory before
	// its last memory replica is evicted.
	OffloadOnEvict bool
	// Shards is the number of lock stripes the object table is split
	// into, each with its own lock (default 1024). (The name is older than
	// the fleet; inside the package these are "stripes", and "shard"
	// always means a sidecar shard.)
	Shards int
	// SnapshotRestoreCleanup drops, when a complete snapshot is restored,
	// every object that is not hard pinned and whose converted lease and
	// soft pin have both run out (the snapshot cleanup of the reference
	// design). Off by default: such an object is acknowledged data that
	// eviction would otherwise drop only under memory pressure.
	SnapshotRestoreCleanup bool
	// TenantQuotas caps the memory bytes (size times memory replicas) of a
	// tenant; a tenant not listed is unlimited.
	TenantQuotas map[string]uint64
	// Liveness are the client liveness TTLs (Active -> Suspected ->
	// Offline) and the monitor's pace.
	Liveness LivenessConfig
	// Offboarding tunes how the offboarding of Offline clients runs.
	Offboarding OffboardingConfig
}

// RecoveryTTL is the effective recovery lease TTL.
func (c Config) RecoveryTTL() time.Duration {
	if c.RecoveryLeaseTTL > 0 {
		return c.RecoveryLeaseTTL
	}
	return c.DefaultLeaseTTL
}

func (c Config) withDefaults() Config {
	if c.DefaultLeaseTTL == 0 {
		c.DefaultLeaseTTL = 10 * time.Second
	}
	if c.SoftPinTTL == 0 {
		c.SoftPinTTL = 30 * time.Minute
	}
	if c.HighWatermark == 0 {
		c.HighWatermark = 0.90
	}
	if c.EvictionRatio == 0 {
		c.EvictionRatio = 0.05
	}
	if c.Shards == 0 {
		c.Shards = 1024
	}
	c.Liveness = c.Liveness.WithDefaults()
	c.Offboarding = c.Offboarding.withDefaults()
	return c
}

// Bounds of the lease TTLs (Config.DefaultLeaseTTL, RecoveryLeaseTTL)
// and of the soft-pin TTL: a lease of 876000h would keep every object a
// reader touched for a century.
const (
	MinLeaseTTL   = 10 * time.Millisecond
	MaxLeaseTTL   = 24 * time.Hour
	MaxSoftPinTTL = 30 * 24 * time.Hour
)

func (c Config) validate() error {
	switch {
	case c.DefaultLeaseTTL < 0 || c.SoftPinTTL < 0 || c.RecoveryLeaseTTL < 0:
		return fmt.Errorf("%w: lease and soft-pin TTLs must not be negative", ErrInvalidArgument)
	case c.DefaultLeaseTTL < MinLeaseTTL || c.DefaultLeaseTTL > MaxLeaseTTL:
		return fmt.Errorf("%w: lease TTL %v is outside %v..%v", ErrInvalidArgument, c.DefaultLeaseTTL, MinLeaseTTL, MaxLeaseTTL)
	case c.RecoveryLeaseTTL != 0 && (c.RecoveryLeaseTTL < MinLeaseTTL || c.RecoveryLeaseTTL > MaxLeaseTTL):
		return fmt.Errorf("%w: recovery lease TTL %v is outside %v..%v (0: the lease TTL)", ErrInvalidArgument, c.RecoveryLeaseTTL, MinLeaseTTL, MaxLeaseTTL)
	case c.SoftPinTTL > MaxSoftPinTTL:
		return fmt.Errorf("%w: soft-pin TTL %v is over %v", ErrInvalidArgument, c.SoftPinTTL, MaxSoftPinTTL)
	case c.HighWatermark <= 0 || c.HighWatermark > 1:
		return fmt.Errorf("%w: high watermark %v must be in (0, 1]", ErrInvalidArgument, c.HighWatermark)
	case c.EvictionRatio < 0 || c.EvictionRatio > c.HighWatermark:
		return fmt.Errorf("%w: eviction ratio %v must be in [0, high watermark %v]", ErrInvalidArgument, c.EvictionRatio, c.HighWatermark)
	case c.Shards < 1 || c.Shards > 1<<20:
		return fmt.Errorf("%w: shard count %d must be in [1, 1048576]", ErrInvalidArgument, c.Shards)
	}
	for t, q := range c.TenantQuotas {
		if t == "" || len(t) > maxKeyLen || q == 0 {
			return fmt.Errorf("%w: tenant quota %.64q=%d: a tenant is 1 to %d bytes and its quota at least 1 byte", ErrInvalidArgument, t, q, maxKeyLen)
		}
	}
	return c.Liveness.Validate()
}
