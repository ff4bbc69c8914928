package translog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

// Create-only mode writes one object per sync: the md create. No CAS is
// sent, and the fence checks are reads.
func TestCreateOnlyWritesOneObjectPerSync(t *testing.T) {
	r := newRig(t, 1, Options{FencingMode: CreateOnly})
	for i := range 20 {
		a := r.mustAppend(fmt.Sprint("op", i))
		if a.Gen != int64(i+1) {
			t.Fatalf("ack %d at generation %d", i, a.Gen)
		}
	}
	creates, cas, puts := r.store.Requests(blobstore.OpCreateIfAbsent), r.store.Requests(blobstore.OpCompareAndSwap), r.store.Requests(blobstore.OpPut)
	// The claim created the fence key and sent none of the rest.
	if creates-1 != 20 || cas != 0 || puts != 0 {
		t.Fatalf("20 syncs sent %d creates, %d CAS, %d PUT besides the claim's create; want 20, 0, 0", creates-1, cas, puts)
	}
	st := r.w.Stats()
	if st.CASWrites != 0 || st.FenceChecks == 0 || st.FenceChecks > 20 {
		t.Fatalf("stats %+v: want no CAS and between 1 and 20 fence checks", st)
	}
	if got := r.readAll(1, 1, 20); len(got) != 20 || got[19] != "op19" {
		t.Fatalf("read back %v", got)
	}
}

// A successor's claim alone (no seal yet) stops a create-only writer
// through its fence check: at most CheckWindow generations past the last
// check that still found it the owner, so the successor's seal, which
// poisons until it wins, ends.
func TestCreateOnlyFenceCheckStopsTheWriterAfterAClaim(t *testing.T) {
	r := newRig(t, 1, Options{FencingMode: CreateOnly})
	r.mustAppend("before")
	if _, err := fence.Claim(context.Background(), r.inner, shard, 2, "successor", fence.WithClock(clock.NewAuto())); err != nil {
		t.Fatal(err)
	}
	after := 0
	for ; after <= 2*CheckWindow; after++ {
		if _, err := r.append(fmt.Sprint("after", after)); err != nil {
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("append after the claim: %v", err)
			}
			break
		}
	}
	if after > CheckWindow {
		t.Fatalf("%d appends acknowledged after the successor's claim; the fence check allows at most %d", after, CheckWindow)
	}
	if err := r.w.Err(); !errors.Is(err, ErrFenced) {
		t.Fatalf("writer error %v, want fenced", err)
	}
}

// While the fence checks cannot answer, the writer acknowledges nothing
// (no check confirmed it since it opened: the claim does not count), starts
// at most CheckWindow generations past the claim, and goes on once a
// check answers.
func TestCreateOnlyStopsAtTheCheckWindowWhileChecksStall(t *testing.T) {
	r := newRig(t, 1, Options{FencingMode: CreateOnly})
	release := make(chan struct{})
	var once sync.Once
	r.store.SetHooks(faulty.Hooks{Before: func(ctx context.Context, q faulty.Request) error {
		if q.Op == blobstore.OpGet && q.Key == layout.FenceKey(1) {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	defer once.Do(func() { close(release) })
	var pending []*Pending
	for i := range CheckWindow + 1 {
		p, err := r.w.Enqueue(context.Background(), [][]byte{[]byte(fmt.Sprint("op", i))})
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
		if i < CheckWindow {
			// One sync each: the window holds back the last only.
			waitFor(t, func() bool { return r.store.Requests(blobstore.OpCreateIfAbsent)-1 == int64(i+1) })
		}
	}
	// The last is cut into a batch (no longer queued) but not synced.
	waitFor(t, func() bool { return r.w.pendingCount() == 0 })
	select {
	case <-pending[CheckWindow].Done():
		t.Fatal("an append past the window completed while every fence check stalled")
	case <-time.After(50 * time.Millisecond): // room for a create the window should hold back
	}
	for i, p := range pending {
		select {
		case <-p.Done():
			t.Fatalf("append %d completed before any fence check answered", i)
		default:
		}
	}
	if n := r.store.Requests(blobstore.OpCreateIfAbsent) - 1; n != CheckWindow {
		t.Fatalf("%d md creates sent while the checks stalled, want %d", n, CheckWindow)
	}
	once.Do(func() { close(release) })
	for i, p := range pending {
		if a, err := p.Result(); err != nil || a.Gen != int64(i+1) {
			t.Fatalf("append %d once the checks answered: %+v, %v", i, a, err)
		}
	}
}

// A successor's poison at the writer's next generation fences it on that
// create, with no CAS involved.
func TestCreateOnlyPoisonFencesTheNextCreate(t *testing.T) {
	r := newRig(t, 1, Options{FencingMode: CreateOnly})
	a := r.mustAppend("x")
	body, err := EncodePoison(shard, 1, a.Gen+1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.inner.CreateIfAbsent(context.Background(), layout.MDKey(1, a.Gen+1), body); err != nil {
		t.Fatal(err)
	}
	if _, err := r.append("y"); !errors.Is(err, ErrFenced) {
		t.Fatalf("append onto a poison: %v", err)
	}
}
