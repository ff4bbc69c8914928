package seal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/settle"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// DefaultLeaseInterval is the lease a lease-mode shard records when its
// first open left the interval zero (the translog's default).
const DefaultLeaseInterval = translog.DefaultLeaseInterval

// The range of a stored lease interval. A longer lease would make every
// failover of the shard wait that long; a shard whose stored lease lies
// outside the range (stored before the range existed) does not open until
// its fencing is rewritten.
const (
	MinLeaseInterval = 10 * time.Millisecond
	MaxLeaseInterval = 10 * time.Minute
)

var (
	// ErrFencingMismatch: an open asked for fencing on a shard that runs
	// unfenced, or the reverse (a rewrite changes that, at a new term).
	ErrFencingMismatch = errors.New("fencing setting differs from the shard's")
	// ErrFencingRewrite: the shard's fencing is being rewritten; no term
	// opens until the rewrite finished or was rolled back.
	ErrFencingRewrite = errors.New("fencing settings are being rewritten")
	// ErrFencingOutOfRange: the shard's stored lease interval lies outside
	// MinLeaseInterval..MaxLeaseInterval.
	ErrFencingOutOfRange = errors.New("stored lease interval out of range")
)

// Fencing is the write witness of a shard, fixed at its first open.
type Fencing struct {
	Disabled bool
	Mode     translog.FencingMode
	// LeaseInterval is the lease of Lease mode, zero otherwise.
	LeaseInterval time.Duration
}

// FencingOf returns the fencing the writer options o ask for, normalized as
// the shard stores it.
func FencingOf(o translog.Options) Fencing {
	f := Fencing{Disabled: o.FencingDisabled, Mode: o.FencingMode}.normalized()
	if f.Mode == translog.Lease && !f.Disabled {
		f.LeaseInterval = o.LeaseInterval
		if f.LeaseInterval <= 0 {
			f.LeaseInterval = DefaultLeaseInterval
		}
	}
	return f
}

// normalized is f as the shard stores it: an unspecified mode is the
// translog's default (per_sync), and an unfenced shard has no mode or
// lease of its own.
func (f Fencing) normalized() Fencing {
	if f.Disabled {
		return Fencing{Disabled: true, Mode: translog.PerSync}
	}
	if f.Mode == 0 {
		f.Mode = translog.DefaultOptions().FencingMode
	}
	return f
}

// Apply sets f in the writer options o.
func (f Fencing) Apply(o translog.Options) translog.Options {
	o.FencingDisabled, o.FencingMode = f.Disabled, f.Mode
	if f.Mode == translog.Lease {
		o.LeaseInterval = f.LeaseInterval
	}
	return o
}

func (f Fencing) String() string {
	switch {
	case f.Disabled:
		return "disabled"
	case f.Mode == translog.Lease:
		return "lease (" + f.LeaseInterval.String() + ")"
	}
	return f.Mode.String()
}

// checkRange refuses a lease interval outside the stored range.
func (f Fencing) checkRange() error {
	if f.Disabled || f.Mode != translog.Lease {
		return nil
	}
	if f.LeaseInterval < MinLeaseInterval || f.LeaseInterval > MaxLeaseInterval {
		return fmt.Errorf("lease interval %v outside %v..%v", f.LeaseInterval, MinLeaseInterval, MaxLeaseInterval)
	}
	return nil
}

// Weakens reports whether writers running f while a successor runs to
// could acknowledge after the successor stopped waiting: to waits less
// than f may hold a lease (per_sync waits nothing; a shorter lease waits
// less). Only a lease-mode f can be weakened: no other mode acknowledges
// on a lease, and the acks of all of them, unfenced included, are covered
// by the successor's poison (docs/PROTOCOL.md).
func (f Fencing) Weakens(to Fencing) bool {
	if f.Disabled || f.Mode != translog.Lease {
		return false
	}
	return to.Mode != translog.Lease || to.LeaseInterval < f.LeaseInterval
}

// FencingRewrite is a rewrite of the shard's fencing in progress: From is
// what writers may still run, To what the rewrite installs, Term the term
// the rewrite claims. While it is stored, no term opens.
type FencingRewrite struct {
	From, To Fencing
	Term     int64
}

func (rw FencingRewrite) String() string {
	return fmt.Sprintf("from %s to %s by term %d", rw.From, rw.To, rw.Term)
}

const (
	fencingTag     = "shardfence.fencing"
	fencingVersion = "v1"
	fencingFields  = 7
	// rewriteVersion marks a rewrite in progress. A build that reads only
	// v1 sees an unknown version and refuses to open the shard, which is
	// what the rewrite needs of every opener.
	rewriteVersion = "rewrite1"
	rewriteFields  = 10
	// switchVersion marks a rewrite between fenced and unfenced: it
	// records the target's enabled flag too. A build that reads only v1
	// and rewrite1 refuses it as an unknown version, as a rewrite needs.
	switchVersion = "rewrite2"
	switchFields  = 11
)

func fencingParts(f Fencing) []string {
	f = f.normalized()
	enabled := "enabled"
	if f.Disabled {
		enabled = "disabled"
	}
	return []string{enabled, f.Mode.String(), itoa(f.LeaseInterval.Milliseconds())}
}

func sealed(parts ...string) []byte {
	s := strings.Join(parts, "|")
	return []byte(fmt.Sprintf("%s|%08x", s, translog.Checksum([]byte(s))))
}

// encodeFencing is the body: "shardfence.fencing|v1|shard|enabled|mode|
// lease ms|crc32c", a line an operator can read with any store client.
func encodeFencing(shard string, f Fencing) []byte {
	return sealed(append([]string{fencingTag, fencingVersion, shard}, fencingParts(f)...)...)
}

// encodeRewrite is the body of a rewrite in progress: "shardfence.fencing|
// rewrite1|shard|enabled|mode|lease ms|to mode|to lease ms|term|crc32c".
//
// A rewrite between fenced and unfenced is "shardfence.fencing|rewrite2|
// shard|enabled|mode|lease ms|to enabled|to mode|to lease ms|term|crc32c".
func encodeRewrite(shard string, rw FencingRewrite) []byte {
	to := fencingParts(rw.To)
	if rw.From.normalized().Disabled != rw.To.normalized().Disabled {
		return sealed(append(append([]string{fencingTag, switchVersion, shard}, fencingParts(rw.From)...), to[0], to[1], to[2], itoa(rw.Term))...)
	}
	return sealed(append(append([]string{fencingTag, rewriteVersion, shard}, fencingParts(rw.From)...), to[1], to[2], itoa(rw.Term))...)
}

// DecodeFencing parses the settings stored at FencingKey and checks they
// belong to shard. Errors are *fence.BodyError, or ErrFencingRewrite while
// a rewrite is in progress.
func DecodeFencing(shard string, body []byte) (Fencing, error) {
	f, rw, err := decodeStored(shard, body)
	if err == nil && rw != nil {
		return Fencing{}, fmt.Errorf("%w (%s)", ErrFencingRewrite, rw)
	}
	return f, err
}

// decodeStored parses the stored settings: the fencing writers run, and the
// rewrite in progress if any (then the fencing is its From).
func decodeStored(shard string, body []byte) (Fencing, *FencingRewrite, error) {
	bad := func(err error, format string, args ...any) (Fencing, *FencingRewrite, error) {
		return Fencing{}, nil, &fence.BodyError{Shard: shard, Key: layout.FencingKey, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	p := strings.Split(string(body), "|")
	if len(p) < 2 || p[0] != fencingTag {
		return bad(fence.ErrCorruptBody, "not fencing settings (%d bytes)", len(body))
	}
	want := fencingFields
	switch p[1] {
	case fencingVersion:
	case rewriteVersion:
		want = rewriteFields
	case switchVersion:
		want = switchFields
	default:
		return bad(fence.ErrUnknownVersion, "fencing settings version %q, this build reads %s, %s and %s", trunc(p[1]), fencingVersion, rewriteVersion, switchVersion)
	}
	if len(p) != want {
		return bad(fence.ErrCorruptBody, "fencing settings have %d fields, want %d", len(p), want)
	}
	f, err := parseFencing(p[3], p[4], p[5])
	if err != nil {
		return bad(fence.ErrCorruptBody, "%v", err)
	}
	var rw *FencingRewrite
	if p[1] != fencingVersion {
		// rewrite1 keeps the enabled flag; rewrite2 records the target's.
		toEnabled, rest := p[3], p[6:]
		if p[1] == switchVersion {
			toEnabled, rest = p[6], p[7:]
		}
		to, err := parseFencing(toEnabled, rest[0], rest[1])
		if err != nil {
			return bad(fence.ErrCorruptBody, "rewrite target: %v", err)
		}
		term, err := strconv.ParseInt(rest[2], 10, 64)
		if err != nil || term < 1 {
			return bad(fence.ErrCorruptBody, "rewrite term %q", trunc(rest[2]))
		}
		rw = &FencingRewrite{From: f, To: to, Term: term}
		if string(encodeRewrite(p[2], *rw)) != string(body) {
			return bad(fence.ErrCorruptBody, "fencing settings checksum or form does not match their content")
		}
	} else if string(encodeFencing(p[2], f)) != string(body) {
		return bad(fence.ErrCorruptBody, "fencing settings checksum or form does not match their content")
	}
	if p[2] != shard {
		return bad(fence.ErrForeignShard, "fencing settings name shard %q", trunc(p[2]))
	}
	return f, rw, nil
}

func parseFencing(enabled, mode, leaseMS string) (Fencing, error) {
	var f Fencing
	switch enabled {
	case "enabled":
	case "disabled":
		f.Disabled = true
	default:
		return Fencing{}, fmt.Errorf("fencing %q is neither enabled nor disabled", trunc(enabled))
	}
	switch mode {
	case translog.PerSync.String():
		f.Mode = translog.PerSync
	case translog.Lease.String():
		f.Mode = translog.Lease
	case translog.CreateOnly.String():
		f.Mode = translog.CreateOnly
	case translog.Observe.String():
		f.Mode = translog.Observe
	default:
		return Fencing{}, fmt.Errorf("fencing mode %q", trunc(mode))
	}
	ms, err := strconv.ParseInt(leaseMS, 10, 64)
	if err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return Fencing{}, fmt.Errorf("lease interval %q is not a number of milliseconds", trunc(leaseMS))
	}
	f.LeaseInterval = time.Duration(ms) * time.Millisecond
	if f.Mode == translog.Lease && f.LeaseInterval <= 0 {
		return Fencing{}, errors.New("lease mode without a lease interval")
	}
	return f, nil
}

// ShardFencing returns the shard's fencing settings, creating them as want
// when the shard has none yet (its first open). The stored mode and lease
// interval win over want's, so that no term of the shard runs another
// witness than its predecessors; asking for fencing on an unfenced shard,
// or the reverse, is ErrFencingMismatch. The key is read before anything
// is written: a shard that has its settings opens on a store that takes
// no writes (a full disk). A lost create response is settled by reading
// what the key holds. A rewrite in progress is ErrFencingRewrite, a
// stored lease outside the range ErrFencingOutOfRange.
func ShardFencing(ctx context.Context, store *blobstore.Container, shard string, want Fencing, opts Options) (Fencing, error) {
	return shardFencing(ctx, store, shard, want, opts, readThenCreate)
}

// PeekFencing is ShardFencing without the create: found is false (and f
// zero) when the shard has no settings yet. It refuses what ShardFencing
// refuses of stored settings, and costs one GET: recovery.Open runs it
// before its claim, so a refused mode fences nobody.
func PeekFencing(ctx context.Context, store *blobstore.Container, shard string, want Fencing, opts Options) (f Fencing, found bool, err error) {
	f, err = shardFencing(ctx, store, shard, want, opts, readOnly)
	if errors.Is(err, errNoSettings) {
		return Fencing{}, false, nil
	}
	return f, err == nil, err
}

// EnsureFencing is ShardFencing for a shard PeekFencing found without
// settings: it sends the create first (no GET), and settles what the key
// holds if another open created them meanwhile. recovery.Open runs it
// after its sweep, as the read of the settings that counts.
func EnsureFencing(ctx context.Context, store *blobstore.Container, shard string, want Fencing, opts Options) (Fencing, error) {
	return shardFencing(ctx, store, shard, want, opts, createFirst)
}

// How shardFencing reaches the key.
const (
	readThenCreate = iota
	readOnly
	createFirst
)

// errNoSettings: readOnly found no settings.
var errNoSettings = errors.New("no fencing settings stored")

func shardFencing(ctx context.Context, store *blobstore.Container, shard string, want Fencing, opts Options, how int) (Fencing, error) {
	s := storeIO{store: store, shard: shard, opts: opts.withDefaults()}
	want = want.normalized()
	fail := func(err error) (Fencing, error) {
		return Fencing{}, wrapErr("Settings", shard, layout.FencingKey, 0, err)
	}
	var (
		got Fencing
		rw  *FencingRewrite
	)
	step := settle.Step[storedFencing]{
		Key: layout.FencingKey, Body: encodeFencing(shard, want),
		Decode: func(b []byte) (storedFencing, error) {
			f, rw, err := decodeStored(shard, b)
			return storedFencing{f, rw}, err
		},
		// Our create, or a concurrent first open's: the stored settings
		// win either way.
		Ours: func(storedFencing) (bool, string) { return true, "" },
	}
	readFirst := how != createFirst
	err := s.retry(ctx, func(ctx context.Context) error {
		if readFirst {
			obj, found, err := s.get(ctx, layout.FencingKey)
			if err != nil {
				return err
			}
			if found {
				got, rw, err = decodeStored(shard, obj.Body)
				return err
			}
			if how == readOnly {
				return errNoSettings
			}
		}
		readFirst = true
		if err := want.checkRange(); err != nil {
			return fmt.Errorf("%w: %v", fence.ErrInvalidArgument, err)
		}
		v, err := create(ctx, s, step)
		switch v.Action {
		case settle.Created:
			got = want
		case settle.Adopt:
			got, rw = v.Held.fencing, v.Held.rewrite
		case settle.Resend:
			// The read-back just found the key empty: send the create
			// again without another read first.
			readFirst = false
			return errResend("fencing settings")
		}
		return err
	})
	switch {
	case errors.Is(err, errNoSettings):
		return Fencing{}, err
	case err != nil:
		return fail(err)
	case rw != nil:
		return fail(fmt.Errorf("%w %s; no term opens until it finishes: run `shardfence settings` for the shard again (it finishes or rolls back)", ErrFencingRewrite, rw))
	case got.Disabled != want.Disabled:
		return fail(fmt.Errorf("%w: the shard runs fencing %s, this open asks for fencing %s; open it with fencing %s, or change the shard's fencing at a new term with `shardfence settings` (observe mode first shows what fencing would do)",
			ErrFencingMismatch, got, want, enabledWord(got.Disabled)))
	}
	if err := got.checkRange(); err != nil {
		return fail(fmt.Errorf("%w: %v; no term of the shard opens with it (every failover would wait that long): rewrite it with `shardfence settings`", ErrFencingOutOfRange, err))
	}
	return got, nil
}

// storedFencing is what FencingKey holds: the fencing writers run, and the
// rewrite in progress if any.
type storedFencing struct {
	fencing Fencing
	rewrite *FencingRewrite
}

// ReadFencing returns the shard's stored fencing settings, and the rewrite
// in progress if any (then f is what writers may still run); found is
// false when no open created them yet.
func ReadFencing(ctx context.Context, store *blobstore.Container, shard string, opts Options) (f Fencing, rw *FencingRewrite, found bool, err error) {
	s := storeIO{store: store, shard: shard, opts: opts.withDefaults()}
	obj, found, err := s.get(ctx, layout.FencingKey)
	if err != nil || !found {
		return Fencing{}, nil, false, wrapErr("Settings", shard, layout.FencingKey, 0, err)
	}
	f, rw, err = decodeStored(shard, obj.Body)
	if err != nil {
		return Fencing{}, nil, false, err
	}
	return f, rw, true, nil
}

// BeginFencingRewrite stores a rewrite of the shard's fencing to `to` by
// term: from then on no term opens until FinishFencingRewrite installs it
// or AbortFencingRewrite puts From back. A rewrite already in progress is
// taken over (its From stays: that is what writers may still run). done is
// true when the shard already runs `to` and nothing was written. The
// caller claims term after this returns, never before (docs/PROTOCOL.md).
func BeginFencingRewrite(ctx context.Context, store *blobstore.Container, shard string, to Fencing, term int64, opts Options) (rw FencingRewrite, done bool, err error) {
	fail := func(err error) (FencingRewrite, bool, error) {
		return FencingRewrite{}, false, wrapErr("RewriteSettings", shard, layout.FencingKey, term, err)
	}
	to = to.normalized()
	if err := to.checkRange(); err != nil {
		return fail(fmt.Errorf("%w: %v", fence.ErrInvalidArgument, err))
	}
	s := storeIO{store: store, shard: shard, opts: opts.withDefaults()}
	err = s.retry(ctx, func(ctx context.Context) error {
		obj, found, err := s.get(ctx, layout.FencingKey)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: the shard has no stored fencing settings (no open created them): its first open stores the settings it asks for", fence.ErrInvalidArgument)
		}
		cur, prev, err := decodeStored(shard, obj.Body)
		if err != nil {
			return err
		}
		if prev == nil && cur == to {
			done = true
			return nil
		}
		rw = FencingRewrite{From: cur, To: to, Term: term}
		body := encodeRewrite(shard, rw)
		if prev != nil && *prev == rw {
			return nil // our own, from a lost response
		}
		_, err = store.CompareAndSwap(ctx, layout.FencingKey, obj.Token, body)
		if errors.Is(err, blobstore.ErrPreconditionFailed) || blobstore.IsAmbiguous(err) {
			// Read again: our CAS, or another rewrite's.
			return blobstore.Unavailable(fmt.Errorf("settling the fencing rewrite: %w", err))
		}
		return err
	})
	if err != nil {
		return fail(err)
	}
	return rw, done, nil
}

// FinishFencingRewrite installs rw.To if the shard still holds rw, and
// AbortFencingRewrite puts rw.From back; either fails if another rewrite
// took over. Only the caller that waited out what rw requires may finish
// it (docs/PROTOCOL.md); aborting is always safe.
func FinishFencingRewrite(ctx context.Context, store *blobstore.Container, shard string, rw FencingRewrite, opts Options) error {
	return endRewrite(ctx, store, shard, rw, rw.To, opts)
}

// AbortFencingRewrite: see FinishFencingRewrite.
func AbortFencingRewrite(ctx context.Context, store *blobstore.Container, shard string, rw FencingRewrite, opts Options) error {
	return endRewrite(ctx, store, shard, rw, rw.From, opts)
}

func endRewrite(ctx context.Context, store *blobstore.Container, shard string, rw FencingRewrite, install Fencing, opts Options) error {
	s := storeIO{store: store, shard: shard, opts: opts.withDefaults()}
	body := encodeFencing(shard, install)
	err := s.retry(ctx, func(ctx context.Context) error {
		obj, found, err := s.get(ctx, layout.FencingKey)
		if err != nil {
			return err
		}
		if found && string(obj.Body) == string(body) {
			return nil // ours, from a lost response
		}
		if !found || string(obj.Body) != string(encodeRewrite(shard, rw)) {
			return fmt.Errorf("%w: the shard no longer holds the rewrite %s (another rewrite took over)", ErrFencingRewrite, rw)
		}
		_, err = store.CompareAndSwap(ctx, layout.FencingKey, obj.Token, body)
		if errors.Is(err, blobstore.ErrPreconditionFailed) || blobstore.IsAmbiguous(err) {
			return blobstore.Unavailable(fmt.Errorf("settling the fencing rewrite: %w", err))
		}
		return err
	})
	return wrapErr("RewriteSettings", shard, layout.FencingKey, rw.Term, err)
}

// LowerMarkers reports whether any seal marker of a term below term is
// stored: a term that ever opened a writer stored one first, and GC keeps
// the newest.
func LowerMarkers(ctx context.Context, store *blobstore.Container, shard string, term int64, opts Options) (bool, error) {
	s := storeIO{store: store, shard: shard, opts: opts.withDefaults()}
	items, err := s.list(ctx, layout.MarkerPrefix)
	if err != nil {
		return false, wrapErr("Markers", shard, layout.MarkerPrefix, term, err)
	}
	for _, a := range items {
		if t, ok := layout.ParseMarkerKey(a.Key); ok && t < term {
			return true, nil
		}
	}
	return false, nil
}

func enabledWord(disabled bool) string {
	if disabled {
		return "disabled"
	}
	return "enabled"
}
