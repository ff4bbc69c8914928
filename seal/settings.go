package seal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

// FencingKey holds the shard's fencing settings, created at its first open
// and never rewritten: a successor's lease wait depends on the mode its
// predecessors ran, so the mode is the shard's, not the caller's.
const FencingKey = "settings/fencing"

// DefaultLeaseInterval is the lease a lease-mode shard records when its
// first open left the interval zero (the translog's default).
const DefaultLeaseInterval = 10 * time.Second

// ErrFencingMismatch: an open asked for fencing on a shard created
// unfenced, or the reverse.
var ErrFencingMismatch = errors.New("fencing setting differs from the shard's")

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
	f := Fencing{Disabled: o.FencingDisabled, Mode: o.FencingMode}
	if f.Disabled {
		return Fencing{Disabled: true}
	}
	if f.Mode == translog.Lease {
		f.LeaseInterval = o.LeaseInterval
		if f.LeaseInterval <= 0 {
			f.LeaseInterval = DefaultLeaseInterval
		}
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

const (
	fencingTag     = "shardfence.fencing"
	fencingVersion = "v1"
	fencingFields  = 7
)

// encodeFencing is the body: "shardfence.fencing|v1|shard|enabled|mode|
// lease ms|crc32c", a line an operator can read with any store client.
func encodeFencing(shard string, f Fencing) []byte {
	enabled := "enabled"
	if f.Disabled {
		enabled = "disabled"
	}
	s := strings.Join([]string{fencingTag, fencingVersion, shard, enabled, f.Mode.String(), itoa(f.LeaseInterval.Milliseconds())}, "|")
	return []byte(fmt.Sprintf("%s|%08x", s, translog.Checksum([]byte(s))))
}

// DecodeFencing parses the settings stored at FencingKey and checks they
// belong to shard. Errors are *fence.BodyError.
func DecodeFencing(shard string, body []byte) (Fencing, error) {
	bad := func(err error, format string, args ...any) (Fencing, error) {
		return Fencing{}, &fence.BodyError{Shard: shard, Key: FencingKey, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	p := strings.Split(string(body), "|")
	if len(p) < 2 || p[0] != fencingTag {
		return bad(fence.ErrCorruptBody, "not fencing settings (%d bytes)", len(body))
	}
	if p[1] != fencingVersion {
		return bad(fence.ErrUnknownVersion, "fencing settings version %q, this build reads %s", trunc(p[1]), fencingVersion)
	}
	if len(p) != fencingFields {
		return bad(fence.ErrCorruptBody, "fencing settings have %d fields, want %d", len(p), fencingFields)
	}
	var f Fencing
	switch p[3] {
	case "enabled":
	case "disabled":
		f.Disabled = true
	default:
		return bad(fence.ErrCorruptBody, "fencing %q is neither enabled nor disabled", trunc(p[3]))
	}
	switch p[4] {
	case translog.PerSync.String():
		f.Mode = translog.PerSync
	case translog.Lease.String():
		f.Mode = translog.Lease
	default:
		return bad(fence.ErrCorruptBody, "fencing mode %q", trunc(p[4]))
	}
	ms, err := strconv.ParseInt(p[5], 10, 64)
	if err != nil || ms < 0 {
		return bad(fence.ErrCorruptBody, "lease interval %q is not a number of milliseconds", trunc(p[5]))
	}
	f.LeaseInterval = time.Duration(ms) * time.Millisecond
	if string(encodeFencing(p[2], f)) != string(body) {
		return bad(fence.ErrCorruptBody, "fencing settings checksum or form does not match their content")
	}
	if p[2] != shard {
		return bad(fence.ErrForeignShard, "fencing settings name shard %q", p[2])
	}
	if f.Mode == translog.Lease && f.LeaseInterval <= 0 {
		return bad(fence.ErrCorruptBody, "lease mode without a lease interval")
	}
	return f, nil
}

// ShardFencing returns the shard's fencing settings, creating them as want
// when the shard has none yet (its first open). The stored mode and lease
// interval win over want's, so that no term of the shard runs another
// witness than its predecessors; asking for fencing on an unfenced shard,
// or the reverse, is ErrFencingMismatch. A lost create response is settled
// by reading what the key holds.
func ShardFencing(ctx context.Context, store *blobstore.Container, shard string, want Fencing, opts Options) (Fencing, error) {
	s := io{store: store, shard: shard, opts: opts.withDefaults()}
	var got Fencing
	err := s.retry(ctx, func(ctx context.Context) error {
		_, err := store.CreateIfAbsent(ctx, FencingKey, encodeFencing(shard, want))
		if err == nil {
			got = want
			return nil
		}
		if !errors.Is(err, blobstore.ErrAlreadyExists) && !blobstore.IsAmbiguous(err) {
			return err
		}
		obj, found, err := s.get(ctx, FencingKey)
		if err != nil {
			return err
		}
		if !found {
			return blobstore.Unavailable(errors.New("fencing settings create did not land; sending it again"))
		}
		got, err = DecodeFencing(shard, obj.Body)
		return err
	})
	if err != nil {
		return Fencing{}, wrapErr("Settings", shard, FencingKey, 0, err)
	}
	if got.Disabled != want.Disabled {
		return Fencing{}, wrapErr("Settings", shard, FencingKey, 0, fmt.Errorf("%w: the shard was created with fencing %s, this open asks for fencing %s; open it with fencing %s (a shard never switches between fenced and unfenced)",
			ErrFencingMismatch, got, want, enabledWord(got.Disabled)))
	}
	return got, nil
}

// ReadFencing returns the shard's stored fencing settings; found is false
// when no open created them yet.
func ReadFencing(ctx context.Context, store *blobstore.Container, shard string, opts Options) (f Fencing, found bool, err error) {
	s := io{store: store, shard: shard, opts: opts.withDefaults()}
	obj, found, err := s.get(ctx, FencingKey)
	if err != nil || !found {
		return Fencing{}, false, wrapErr("Settings", shard, FencingKey, 0, err)
	}
	f, err = DecodeFencing(shard, obj.Body)
	if err != nil {
		return Fencing{}, false, err
	}
	return f, true, nil
}

func enabledWord(disabled bool) string {
	if disabled {
		return "disabled"
	}
	return "enabled"
}
