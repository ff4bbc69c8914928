package translog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
)

// Observe mode CASes as per-sync mode does, but a refused CAS is reported
// on the ack instead of failing the append: every ack per-sync mode would
// have failed carries the reason, and nothing before the claim does.
func TestObserveModeReportsWhatPerSyncWouldHaveFailed(t *testing.T) {
	r := newRig(t, 1, Options{FencingMode: Observe})
	before := r.mustAppend("before")
	if before.FencingObserved != "" || r.w.ObservedFencing() != nil {
		t.Fatalf("ack before any successor reports observed fencing: %q", before.FencingObserved)
	}
	if n := r.store.Requests(blobstore.OpCompareAndSwap); n != 1 {
		t.Fatalf("%d CAS requests for one observe-mode sync, want 1 (it CASes as per_sync does)", n)
	}
	if _, err := fence.Claim(context.Background(), r.inner, shard, 2, "successor", fence.WithClock(clock.NewAuto())); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"after1", "after2", "after3"} {
		a, err := r.append(op)
		if err != nil {
			t.Fatalf("observe-mode append after the successor's claim: %v (observe mode must acknowledge it)", err)
		}
		if !strings.Contains(a.FencingObserved, "per_sync would have failed") || strings.Contains(a.FencingObserved, "must stop") {
			t.Fatalf("ack of %q after the claim does not say (only) that per_sync would have failed it: %q", op, a.FencingObserved)
		}
	}
	if err := r.w.ObservedFencing(); !errors.Is(err, ErrFenced) {
		t.Fatalf("ObservedFencing %v, want the fenced verdict", err)
	}
	if st := r.w.Stats(); st.FencingObserved != 3 {
		t.Fatalf("stats count %d observed syncs, want 3", st.FencingObserved)
	}
	if err := r.w.Err(); err != nil {
		t.Fatalf("observe-mode writer reports %v after an observed fencing, want none", err)
	}
	if got := r.readAll(1, 1, 4); strings.Join(got, " ") != "before after1 after2 after3" {
		t.Fatalf("read back %v", got)
	}
}

// A poison at the next generation stops an observe-mode writer as it stops
// an unfenced one: the op has no place in the log, and the successor's
// restore point holds every op acknowledged before.
func TestObserveModeStopsAtAPoison(t *testing.T) {
	r := newRig(t, 1, Options{FencingMode: Observe})
	r.mustAppend("a")
	if _, err := fence.Claim(context.Background(), r.inner, shard, 2, "successor", fence.WithClock(clock.NewAuto())); err != nil {
		t.Fatal(err)
	}
	r.mustAppend("b") // observed, acknowledged
	restored := sealForTest(context.Background(), t, r.store.Container, 2)
	if !restored["a"] || !restored["b"] {
		t.Fatalf("restore point %v lacks an acknowledged op", restored)
	}
	// The error names the poison, not the CAS refused (and only
	// reported) before it.
	if _, err := r.append("c"); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "poison") {
		t.Fatalf("observe-mode append onto the successor's poison: %v, want fenced by the poison", err)
	}
}
