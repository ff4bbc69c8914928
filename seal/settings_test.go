package seal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

func TestFencingRoundTripAndRejects(t *testing.T) {
	for _, f := range []Fencing{{Mode: translog.PerSync}, {Mode: translog.Lease, LeaseInterval: 3 * time.Second}, {Disabled: true}} {
		got, err := DecodeFencing("s", encodeFencing("s", f))
		if err != nil || got != f {
			t.Fatalf("round trip of %v: %v, %v", f, got, err)
		}
	}
	body := encodeFencing("s", Fencing{Mode: translog.Lease, LeaseInterval: time.Second})
	for name, c := range map[string]struct {
		shard string
		body  string
		want  error
	}{
		"foreign shard": {"t", string(body), fence.ErrForeignShard},
		"flipped mode":  {"s", strings.Replace(string(body), "lease", "per_sync", 1), fence.ErrCorruptBody},
		"new version":   {"s", strings.Replace(string(body), "|v1|", "|v9|", 1), fence.ErrUnknownVersion},
		"not settings":  {"s", "hello", fence.ErrCorruptBody},
	} {
		if _, err := DecodeFencing(c.shard, []byte(c.body)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// The first open fixes the mode; later opens get the stored mode and
// interval whatever they ask, and a lost create response is settled by
// what the key holds.
func TestShardFencingIsFixedAtTheFirstOpen(t *testing.T) {
	ctx := context.Background()
	store := faulty.New(mem.New(), 1)
	store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Fault: faulty.LostResponse, Times: 1})
	opts := Options{Clock: fence.NewAutoClock()}
	lease := Fencing{Mode: translog.Lease, LeaseInterval: 2 * time.Second}
	got, err := ShardFencing(ctx, store.Container, "s", lease, opts)
	if err != nil || got != lease {
		t.Fatalf("first open: %v, %v (want %v after a lost create response)", got, err, lease)
	}
	got, err = ShardFencing(ctx, store.Container, "s", FencingOf(translog.Options{}), opts)
	if err != nil || got != lease {
		t.Fatalf("a per-sync open of the lease shard: %v, %v, want the stored %v", got, err, lease)
	}
	if f, found, err := ReadFencing(ctx, store.Container, "s", opts); err != nil || !found || f != lease {
		t.Fatalf("read: %v %v %v", f, found, err)
	}
	_, err = ShardFencing(ctx, store.Container, "s", Fencing{Disabled: true}, opts)
	if !errors.Is(err, ErrFencingMismatch) || !strings.Contains(err.Error(), `"s"`) {
		t.Fatalf("an unfenced open of a fenced shard: %v, want ErrFencingMismatch naming the shard", err)
	}
	if _, found, err := ReadFencing(ctx, mem.New(), "s", opts); err != nil || found {
		t.Fatalf("a shard never opened: found %v, %v", found, err)
	}
}

func TestFencingOfNormalizes(t *testing.T) {
	if f := FencingOf(translog.Options{FencingMode: translog.Lease}); f.LeaseInterval != DefaultLeaseInterval {
		t.Errorf("lease without an interval: %v", f)
	}
	if f := FencingOf(translog.Options{FencingMode: translog.PerSync, LeaseInterval: time.Second}); f.LeaseInterval != 0 {
		t.Errorf("per-sync records no lease: %v", f)
	}
	if f := FencingOf(translog.Options{FencingDisabled: true, FencingMode: translog.Lease}); f != (Fencing{Disabled: true}) {
		t.Errorf("disabled: %v", f)
	}
}
