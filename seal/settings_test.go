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
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

func TestFencingRoundTripAndRejects(t *testing.T) {
	for _, f := range []Fencing{{Mode: translog.PerSync}, {Mode: translog.Lease, LeaseInterval: 3 * time.Second}, {Disabled: true},
		{Mode: translog.CreateOnly}, {Mode: translog.Observe}} {
		got, err := DecodeFencing("s", encodeFencing("s", f))
		if err != nil || got != f.normalized() {
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
	opts := Options{Clock: clock.NewAuto()}
	lease := Fencing{Mode: translog.Lease, LeaseInterval: 2 * time.Second}
	got, err := ShardFencing(ctx, store.Container, "s", lease, opts)
	if err != nil || got != lease {
		t.Fatalf("first open: %v, %v (want %v after a lost create response)", got, err, lease)
	}
	got, err = ShardFencing(ctx, store.Container, "s", FencingOf(translog.Options{}), opts)
	if err != nil || got != lease {
		t.Fatalf("a per-sync open of the lease shard: %v, %v, want the stored %v", got, err, lease)
	}
	if f, rw, found, err := ReadFencing(ctx, store.Container, "s", opts); err != nil || !found || f != lease || rw != nil {
		t.Fatalf("read: %v %v %v %v", f, rw, found, err)
	}
	_, err = ShardFencing(ctx, store.Container, "s", Fencing{Disabled: true}, opts)
	if !errors.Is(err, ErrFencingMismatch) || !strings.Contains(err.Error(), `"s"`) {
		t.Fatalf("an unfenced open of a fenced shard: %v, want ErrFencingMismatch naming the shard", err)
	}
	if _, _, found, err := ReadFencing(ctx, mem.New(), "s", opts); err != nil || found {
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
	if f := FencingOf(translog.Options{FencingDisabled: true, FencingMode: translog.Lease}); f != (Fencing{Disabled: true, Mode: translog.PerSync}) {
		t.Errorf("disabled: %+v", f)
	}
	if f := FencingOf(translog.Options{}); f != (Fencing{Mode: translog.PerSync}) {
		t.Errorf("an unspecified mode is the translog's default: %+v", f)
	}
	// Every spelling of the same fencing stores the same bytes as before
	// the modes had an unspecified zero.
	for _, c := range []struct {
		f    Fencing
		body string
	}{
		{Fencing{}, "shardfence.fencing|v1|s|enabled|per_sync|0"},
		{Fencing{Mode: translog.PerSync}, "shardfence.fencing|v1|s|enabled|per_sync|0"},
		{Fencing{Disabled: true}, "shardfence.fencing|v1|s|disabled|per_sync|0"},
		{Fencing{Mode: translog.Lease, LeaseInterval: 1500 * time.Millisecond}, "shardfence.fencing|v1|s|enabled|lease|1500"},
	} {
		if got := string(encodeFencing("s", c.f)); !strings.HasPrefix(got, c.body+"|") {
			t.Errorf("%+v stored as %q, want %q and its checksum", c.f, got, c.body)
		}
	}
}

// A shard that has its settings opens without writing anything: the key is
// read first, so a store that takes no writes (a full disk) still opens it.
func TestShardFencingReadsBeforeItWrites(t *testing.T) {
	ctx := context.Background()
	store := faulty.New(mem.New(), 1)
	opts := Options{Clock: clock.NewAuto(), Backoff: fence.Backoff{Attempts: 2}}
	lease := Fencing{Mode: translog.Lease, LeaseInterval: 2 * time.Second}
	if _, err := ShardFencing(ctx, store.Container, "s", lease, opts); err != nil {
		t.Fatal(err)
	}
	store.MustAdd(faulty.Rule{Ops: faulty.Writes, Fault: faulty.Unavailable})
	got, err := ShardFencing(ctx, store.Container, "s", Fencing{}, opts)
	if err != nil || got != lease {
		t.Fatalf("open of an existing shard on a store that takes no writes: %v, %v", got, err)
	}
	if n := store.Requests(blobstore.OpCreateIfAbsent); n != 1 {
		t.Errorf("%d creates, want only the first open's", n)
	}
}

// A lease outside the range is never stored, and one stored before the
// range existed refuses the open (every failover would wait that long)
// instead of waiting it out.
func TestLeaseIntervalIsBounded(t *testing.T) {
	ctx := context.Background()
	opts := Options{Clock: clock.NewAuto()}
	for _, d := range []time.Duration{time.Millisecond, MaxLeaseInterval + time.Millisecond, 87600 * time.Hour} {
		store := mem.New()
		_, err := ShardFencing(ctx, store, "s", Fencing{Mode: translog.Lease, LeaseInterval: d}, opts)
		if !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("lease %v: %v, want invalid argument", d, err)
		}
		if _, _, found, _ := ReadFencing(ctx, store, "s", opts); found {
			t.Errorf("lease %v was stored", d)
		}
	}
	store := mem.New()
	if _, err := store.CreateIfAbsent(ctx, layout.FencingKey, encodeFencing("s", Fencing{Mode: translog.Lease, LeaseInterval: 87600 * time.Hour})); err != nil {
		t.Fatal(err)
	}
	_, err := ShardFencing(ctx, store, "s", Fencing{}, opts)
	if !errors.Is(err, ErrFencingOutOfRange) || !strings.Contains(err.Error(), "shardfence settings") {
		t.Fatalf("open of a shard storing an 87600h lease: %v, want ErrFencingOutOfRange naming the way out", err)
	}
	if _, err := DecodeFencing("s", encodeFencing("s", Fencing{Mode: translog.Lease, LeaseInterval: 87600 * time.Hour})); err != nil {
		t.Fatalf("an out-of-range lease must still decode, so inspect shows it: %v", err)
	}
}

// A rewrite in progress stops every open, is readable by inspect, is taken
// over by a second rewrite keeping its From, and ends by installing To or
// putting From back; a body with a rewrite is unreadable to a build that
// knows only v1.
func TestFencingRewriteLifecycle(t *testing.T) {
	ctx := context.Background()
	store := faulty.New(mem.New(), 1)
	opts := Options{Clock: clock.NewAuto()}
	lease := Fencing{Mode: translog.Lease, LeaseInterval: 5 * time.Second}
	if _, err := ShardFencing(ctx, store.Container, "s", lease, opts); err != nil {
		t.Fatal(err)
	}
	if _, done, err := BeginFencingRewrite(ctx, store.Container, "s", lease, 2, opts); err != nil || !done {
		t.Fatalf("rewrite to what runs: done %v, %v", done, err)
	}
	store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Fault: faulty.LostResponse, Times: 1})
	rw, _, err := BeginFencingRewrite(ctx, store.Container, "s", Fencing{Mode: translog.PerSync}, 2, opts)
	if err != nil || rw.From != lease || rw.To.Mode != translog.PerSync || rw.Term != 2 {
		t.Fatalf("begin: %+v, %v", rw, err)
	}
	if _, err := ShardFencing(ctx, store.Container, "s", Fencing{}, opts); !errors.Is(err, ErrFencingRewrite) {
		t.Fatalf("open during a rewrite: %v, want ErrFencingRewrite", err)
	}
	obj, err := store.Get(ctx, layout.FencingKey)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(obj.Body), "|"+rewriteVersion+"|") || strings.Contains(string(obj.Body), "|"+fencingVersion+"|") {
		t.Fatalf("a rewrite must not look like a v1 body to an older build: %q", obj.Body)
	}
	f, got, found, err := ReadFencing(ctx, store.Container, "s", opts)
	if err != nil || !found || f != lease || got == nil || *got != rw {
		t.Fatalf("read during the rewrite: %v %+v %v %v", f, got, found, err)
	}
	shorter := Fencing{Mode: translog.Lease, LeaseInterval: time.Second}
	rw2, _, err := BeginFencingRewrite(ctx, store.Container, "s", shorter, 3, opts)
	if err != nil || rw2.From != lease || rw2.To != shorter {
		t.Fatalf("take over: %+v, %v (From must stay what writers may run)", rw2, err)
	}
	if err := FinishFencingRewrite(ctx, store.Container, "s", rw, opts); !errors.Is(err, ErrFencingRewrite) {
		t.Fatalf("finishing a rewrite another took over: %v", err)
	}
	if err := AbortFencingRewrite(ctx, store.Container, "s", rw2, opts); err != nil {
		t.Fatal(err)
	}
	if got, err := ShardFencing(ctx, store.Container, "s", Fencing{}, opts); err != nil || got != lease {
		t.Fatalf("after the abort: %v, %v, want %v", got, err, lease)
	}
	rw3, _, err := BeginFencingRewrite(ctx, store.Container, "s", shorter, 4, opts)
	if err != nil {
		t.Fatal(err)
	}
	store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Fault: faulty.LostResponse, Times: 1})
	if err := FinishFencingRewrite(ctx, store.Container, "s", rw3, opts); err != nil {
		t.Fatal(err)
	}
	if got, err := ShardFencing(ctx, store.Container, "s", Fencing{}, opts); err != nil || got != shorter {
		t.Fatalf("after the rewrite: %v, %v, want %v", got, err, shorter)
	}
}

func TestWeakens(t *testing.T) {
	per := Fencing{Mode: translog.PerSync}
	l5 := Fencing{Mode: translog.Lease, LeaseInterval: 5 * time.Second}
	l9 := Fencing{Mode: translog.Lease, LeaseInterval: 9 * time.Second}
	co, obs, off := Fencing{Mode: translog.CreateOnly}, Fencing{Mode: translog.Observe}, Fencing{Disabled: true}
	for _, c := range []struct {
		from, to Fencing
		want     bool
	}{{per, l5, false}, {per, per, false}, {l5, l9, false}, {l5, l5, false}, {l9, l5, true}, {l5, per, true},
		{l5, co, true}, {l5, obs, true}, {l5, off, true}, {co, per, false}, {obs, co, false}, {off, per, false}, {off, l5, false}} {
		if got := c.from.Weakens(c.to); got != c.want {
			t.Errorf("%v -> %v weakens: %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

// A rewrite may switch between fenced and unfenced (at its new term): its
// record then carries the target's enabled flag in a version older builds
// refuse, and it round-trips.
func TestFencingRewriteBetweenFencedAndUnfenced(t *testing.T) {
	ctx := context.Background()
	store := mem.New()
	opts := Options{Clock: clock.NewAuto()}
	off, obs := Fencing{Disabled: true}, Fencing{Mode: translog.Observe}
	if _, err := ShardFencing(ctx, store, "s", off, opts); err != nil {
		t.Fatal(err)
	}
	for i, to := range []Fencing{obs, {Mode: translog.CreateOnly}, off} {
		rw, done, err := BeginFencingRewrite(ctx, store, "s", to, int64(2+i), opts)
		if err != nil || done {
			t.Fatalf("begin rewrite to %v: done %v, %v", to, done, err)
		}
		obj, err := store.Get(ctx, layout.FencingKey)
		if err != nil {
			t.Fatal(err)
		}
		switching := rw.From.Disabled != rw.To.Disabled
		if switching != strings.Contains(string(obj.Body), "|"+switchVersion+"|") {
			t.Fatalf("rewrite %s stored as %q", rw, obj.Body)
		}
		if _, got, _, err := ReadFencing(ctx, store, "s", opts); err != nil || got == nil || *got != rw {
			t.Fatalf("read back %+v, %v, want %+v", got, err, rw)
		}
		if err := FinishFencingRewrite(ctx, store, "s", rw, opts); err != nil {
			t.Fatal(err)
		}
		if got, err := ShardFencing(ctx, store, "s", to, opts); err != nil || got != to.normalized() {
			t.Fatalf("after the rewrite to %v: %v, %v", to, got, err)
		}
	}
	// A rewrite2 body that does not switch is not in canonical form.
	body := encodeRewrite("s", FencingRewrite{From: off, To: obs, Term: 9})
	same := strings.Replace(string(body), "|disabled|per_sync|0|enabled|", "|disabled|per_sync|0|disabled|", 1)
	if _, _, err := decodeStored("s", []byte(same)); !errors.Is(err, fence.ErrCorruptBody) {
		t.Fatalf("tampered rewrite2 body: %v, want corrupt", err)
	}
}
