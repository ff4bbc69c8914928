package translog

import (
	"fmt"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/layout"
)

// AckOrder is how one sync orders its md create and its fence CAS. The
// zero AckOrder is unspecified: DefaultOptions' (Concurrent) applies.
type AckOrder int

const (
	// Concurrent sends the md create and the CAS together: one round trip
	// per sync. Safe because md is create-only and successors poison.
	Concurrent AckOrder = iota + 1
	// Sequenced creates the md, then CASes: two round trips, the order of
	// the reference design, kept for comparison.
	Sequenced
)

func (o AckOrder) String() string { return enumName(int(o), "concurrent", "sequenced") }

// FencingMode is how often a sync CASes the fence key. The zero
// FencingMode is unspecified: DefaultOptions' (PerSync) applies.
type FencingMode int

const (
	// PerSync CASes on every sync.
	PerSync FencingMode = iota + 1
	// Lease CASes at most once per lease interval and acks without a CAS
	// while the steady clock is inside the lease. The successor must wait
	// the interval plus a margin after its sweep.
	Lease
	// CreateOnly sends no CAS on the sync path: a generation is
	// acknowledged once its md exists as this writer's own, every lower
	// generation of the writer was acknowledged, and a read of the fence
	// key this writer sent found it the owner (the first goes beside the
	// first sync's md create; the claim does not count). The successor's
	// seal, which poisons until one of its poisons lands, is the only
	// fence; the background reads of the fence key (one every
	// CheckWindow/2 generations, at most one in flight, syncs at most
	// CheckWindow generations past the last good one) stop a writer that
	// lost the term, so that seal ends (docs/PROTOCOL.md, sections 3 and
	// 4).
	CreateOnly
	// Observe claims and CASes the fence key as PerSync does, but a
	// refused CAS is reported instead of failing the append: the writer
	// acknowledges on its md alone, as an unfenced writer does, and marks
	// every ack that PerSync mode would have failed (Ack.FencingObserved,
	// Stats.FencingObserved). It protects nothing a successor needs beyond
	// what an unfenced shard has: it shows an operator what fencing would
	// do before it is enforced. A poison at the writer's next generation
	// still stops it, as it stops an unfenced writer: the op has no place
	// in the log.
	Observe
)

// CheckWindow is the default of Options.CheckWindow: how many generations
// a CreateOnly writer may start past the last fence check that found it
// the owner. A writer whose checks stall stops there, so a successor's seal
// racing it ends.
const CheckWindow = 8

// String is the mode's name in the shard's stored settings and the API.
func (m FencingMode) String() string {
	return enumName(int(m), "per_sync", "lease", "create_only", "observe")
}

// enumName names value n of an enum numbered from 1, whose zero is
// unspecified.
func enumName(n int, names ...string) string {
	if n < 1 || n > len(names) {
		return "unspecified"
	}
	return names[n-1]
}

// Options configure a Writer. The fencing settings are fixed when the
// writer opens. A zero field takes DefaultOptions' value.
type Options struct {
	// Shard, Term and Allocation name the writer when fencing is
	// disabled; with fencing they come from the chain (and must match it
	// when set).
	Shard      string
	Term       int64
	Allocation string

	// StartGen is the first generation to write: the restore point's
	// generation + 1. Default 1.
	StartGen int64
	// StartSeqNo is the sequence number of the first op. Default 0.
	StartSeqNo int64

	// AckOrder: default Concurrent.
	AckOrder AckOrder
	// FencingDisabled runs the unfenced baseline: md creates only, no CAS.
	FencingDisabled bool
	// FencingMode: default PerSync.
	FencingMode FencingMode
	// LeaseInterval is the lease of Lease mode. Default 10s.
	LeaseInterval time.Duration
	// CheckWindow is how many generations a CreateOnly writer may start
	// past the last fence check that found it the owner; it checks every
	// CheckWindow/2 generations. Default CheckWindow (8); at least 2.
	CheckWindow int

	// InlineLimit: payloads up to this size go inside the md; larger ones
	// are written to a data object first. Default 1 MiB, capped by the
	// store's conditional-body limit.
	InlineLimit int
	// MaxSyncBytes caps the payload of one sync. Default 16 MiB.
	MaxSyncBytes int64
	// MaxInFlightBytes caps the bytes appended but not yet acknowledged.
	// Append waits for room, or fails with ErrBackpressure if FailFast.
	// Default 64 MiB.
	MaxInFlightBytes int64
	FailFast         bool
	// MaxPipeline caps md creates in flight in Concurrent per-sync mode:
	// the next sync may start once the previous CAS returned, while its
	// md is still on the wire. Default 4.
	MaxPipeline int
	// MaxGatherDelay bounds how long a sync waits for a batch as large as
	// the previous one (at most 1/8 of the last sync's duration), so a
	// closed loop of appenders lands in one sync instead of splitting
	// into a tiny and a large one. Default 2ms; negative disables.
	MaxGatherDelay time.Duration

	Clock   clock.Clock
	Backoff backoff.Policy
}

// Ack says where the ops of one Append landed.
type Ack struct {
	Term       int64
	Gen        int64
	FirstSeqNo int64 // the ops got FirstSeqNo .. FirstSeqNo+Count-1
	Count      int
	// FencingObserved is set in Observe mode when PerSync mode would have
	// failed this append instead: the fence CAS was refused (a successor
	// claimed the shard, or the key was handed on). It says why.
	FencingObserved string
}

// Stats are the writer's counters.
type Stats struct {
	Syncs       int64
	Ops         int64
	Bytes       int64 // payload bytes
	CASWrites   int64 // fence advances sent by syncs
	LeaseSkips  int64 // syncs acknowledged inside the lease without a CAS
	FenceChecks int64 // fence key reads of create-only mode
	// FencingObserved counts the syncs an Observe-mode writer acknowledged
	// that PerSync mode would have failed.
	FencingObserved int64
	DataObjects     int64 // syncs whose payload went to a data object
}

// StoreHealth is what the writer has seen of the store. Syncs retry store
// trouble for as long as the writer is open (giving up would leave a
// generation's outcome unknown), so appends simply wait during an outage;
// this is how an operator learns why.
type StoreHealth struct {
	// LastError is the last store error a sync step retried; nil if none
	// was seen. It stays after the store recovered (see LastErrorAt).
	LastError   error
	LastErrorAt time.Time
	// RetryingSince is when the sync steps retrying now started failing;
	// zero when no step is retrying.
	RetryingSince time.Time
	// LastSync is when the writer last acknowledged a generation; zero
	// before the first.
	LastSync time.Time
	// Retries counts the store errors sync steps retried.
	Retries int64
	// WaitingSince is when the oldest store request of a sync step now
	// in flight was sent; zero when none is. A store that holds requests
	// without answering (a network partition that drops packets, a frozen
	// server) shows here long before the request fails.
	WaitingSince time.Time
}

// Retrying reports whether a sync step is retrying store errors now.
func (h StoreHealth) Retrying() bool { return !h.RetryingSince.IsZero() }

// DefaultLeaseInterval is the lease of Lease mode when none is given; a
// lease-mode shard stores it at its first open.
const DefaultLeaseInterval = 10 * time.Second

// DefaultOptions are the writer options a zero field takes: per-sync
// fencing in the concurrent order, 1 MiB inline, 16 MiB syncs, 64 MiB in
// flight, 4 md creates in the pipeline, a 2ms gather delay, a 10s lease,
// the system's steady clock and the default backoff.
func DefaultOptions() Options {
	return Options{
		AckOrder: Concurrent, FencingMode: PerSync, LeaseInterval: DefaultLeaseInterval,
		InlineLimit: 1 << 20, MaxSyncBytes: 16 << 20, MaxInFlightBytes: 64 << 20,
		MaxPipeline: 4, MaxGatherDelay: 2 * time.Millisecond,
		Clock: clock.System(), Backoff: backoff.Store(),
	}
}

// withDefaults fills the zero fields of o from DefaultOptions (and a
// non-positive lease, limit or pipeline; a negative gather delay stays:
// it disables gathering).
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.StartGen == 0 {
		o.StartGen = 1
	}
	if o.AckOrder == 0 {
		o.AckOrder = d.AckOrder
	}
	if o.FencingMode == 0 {
		o.FencingMode = d.FencingMode
	}
	if o.LeaseInterval <= 0 {
		o.LeaseInterval = d.LeaseInterval
	}
	if o.CheckWindow <= 0 {
		o.CheckWindow = CheckWindow
	}
	o.CheckWindow = max(o.CheckWindow, 2)
	if o.InlineLimit <= 0 {
		o.InlineLimit = d.InlineLimit
	}
	if o.MaxSyncBytes <= 0 {
		o.MaxSyncBytes = d.MaxSyncBytes
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = d.MaxInFlightBytes
	}
	if o.MaxPipeline <= 0 {
		o.MaxPipeline = d.MaxPipeline
	}
	if o.MaxGatherDelay == 0 {
		o.MaxGatherDelay = d.MaxGatherDelay
	}
	if o.Clock == nil {
		o.Clock = d.Clock
	}
	if o.Backoff.Attempts == 0 && o.Backoff.Initial == 0 {
		o.Backoff = d.Backoff
	}
	return o
}

// check validates o for a writer on store and chain (identity from the
// chain, the start generation above what the fence key commits, the
// store's conditional writes) and fills its defaults; inline is the inline
// limit capped below the store's conditional-body limit.
func (opts Options) check(store *blobstore.Container, chain *fence.Chain) (Options, int, error) {
	fail := func(err error) (Options, int, error) {
		return Options{}, 0, &Error{Op: "Open", Shard: opts.Shard, Key: layout.TranslogDir, Err: err}
	}
	if store == nil {
		return fail(fmt.Errorf("%w: nil store", fence.ErrInvalidArgument))
	}
	if !opts.FencingDisabled {
		if chain == nil {
			return fail(fmt.Errorf("%w: fencing is enabled but no fence chain was given (claim the term first)", fence.ErrInvalidArgument))
		}
		if err := chain.Err(); err != nil {
			return Options{}, 0, err
		}
		for _, m := range []struct {
			what string
			ok   bool
		}{
			{"shard", opts.Shard == "" || opts.Shard == chain.Shard()},
			{"term", opts.Term == 0 || opts.Term == chain.Term()},
			{"allocation", opts.Allocation == "" || opts.Allocation == chain.Allocation()},
		} {
			if !m.ok {
				return fail(fmt.Errorf("%w: options name another %s than the fence chain", fence.ErrInvalidArgument, m.what))
			}
		}
		opts.Shard, opts.Term, opts.Allocation = chain.Shard(), chain.Term(), chain.Allocation()
		if committed := chain.State().Record.Gen; opts.StartGen != 0 && opts.StartGen <= committed {
			return fail(fmt.Errorf("%w: start generation %d is not above generation %d the fence key already commits", fence.ErrInvalidArgument, opts.StartGen, committed))
		} else if opts.StartGen == 0 {
			opts.StartGen = committed + 1
		}
	}
	if err := ident.Validate("shard", opts.Shard, false); err != nil {
		return fail(err)
	}
	if err := ident.Validate("allocation", opts.Allocation, false); err != nil {
		return fail(err)
	}
	if opts.Term < 1 {
		return fail(fmt.Errorf("%w: term %d", fence.ErrInvalidArgument, opts.Term))
	}
	caps := store.Capabilities()
	if !caps.ConditionalCreate || (!opts.FencingDisabled && !caps.ConditionalUpdate) {
		return fail(fmt.Errorf("%w: %s does not advertise the conditional create and update fenced writes need", blobstore.ErrPreconditionsNotEnforced, store))
	}
	opts = opts.withDefaults()
	if opts.StartGen < 1 || opts.StartSeqNo < 0 {
		return fail(fmt.Errorf("%w: start generation %d, start sequence number %d", fence.ErrInvalidArgument, opts.StartGen, opts.StartSeqNo))
	}
	inline := opts.InlineLimit
	if caps.MaxConditionalBody > 0 && int64(inline)+1024 > caps.MaxConditionalBody {
		inline = int(max(0, caps.MaxConditionalBody-1024))
	}
	return opts, inline, nil
}
