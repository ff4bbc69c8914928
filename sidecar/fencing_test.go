package sidecar

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

// The fencing mode is the shard's: a relocation target and a later term
// run the mode the shard was created with, not their sidecar's defaults,
// and report it.
func TestShardKeepsItsFencingModeAcrossHandoffAndTerms(t *testing.T) {
	store := mem.New()
	const lease = 100 * time.Millisecond
	server := func(def Settings) *Server {
		s, err := New(t.Context(), store, Options{Defaults: def})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		return s
	}
	src, dst, next := server(Settings{}), server(Settings{}), server(Settings{})
	if _, err := src.Open(t.Context(), "m", 1, "src", Settings{Mode: translog.Lease, LeaseInterval: lease}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Append(t.Context(), "m", [][]byte{[]byte("a")}, 1); err != nil {
		t.Fatal(err)
	}
	hc, err := src.StartHandoff(t.Context(), "m", "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := dst.AdoptHandoff(t.Context(), hc, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings.Mode != translog.Lease || st.Settings.LeaseInterval != lease {
		t.Errorf("target runs %v (lease %v), want the shard's lease mode (%v)", st.Settings.Mode, st.Settings.LeaseInterval, lease)
	}
	if _, err := dst.Append(t.Context(), "m", [][]byte{[]byte("b")}, 1); err != nil {
		t.Fatal(err)
	}
	// A successor asking for per-sync (its defaults) runs lease mode.
	st, err = next.Open(t.Context(), "m", 2, "next", Settings{Mode: translog.PerSync}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings.Mode != translog.Lease || st.Settings.LeaseInterval != lease {
		t.Errorf("successor runs %v (lease %v), want the shard's lease mode (%v)", st.Settings.Mode, st.Settings.LeaseInterval, lease)
	}
	if st.Restore.Gen != 2 || st.Restore.NextSeqNo != 2 {
		t.Errorf("successor restore point %+v, want both terms' ops", st.Restore)
	}
}

// A create-only shard: the target of a handoff and the next term run it
// whatever they ask for, and the deposed target acknowledges nothing once
// the next term opened (the seal's poison is its fence).
func TestCreateOnlyShardAcrossHandoffAndTerms(t *testing.T) {
	store := mem.New()
	server := func() *Server {
		s, err := New(t.Context(), store, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		return s
	}
	src, dst, next := server(), server(), server()
	if _, err := src.Open(t.Context(), "c", 1, "src", Settings{Mode: translog.CreateOnly}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Append(t.Context(), "c", [][]byte{[]byte("a")}, 1); err != nil {
		t.Fatal(err)
	}
	// No CAS on the sync path: status says none was seen.
	if st, err := src.Status("c"); err != nil || st.LastCASAge != -1 || st.Stats.CASWrites != 0 {
		t.Fatalf("create-only status: last CAS age %v, %d CAS writes (%v); want none", st.LastCASAge, st.Stats.CASWrites, err)
	}
	hc, err := src.StartHandoff(t.Context(), "c", "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	st, err := dst.AdoptHandoff(t.Context(), hc, Settings{Mode: translog.PerSync})
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings.Mode != translog.CreateOnly {
		t.Errorf("target runs %v, want the shard's create_only", st.Settings.Mode)
	}
	if _, err := dst.Append(t.Context(), "c", [][]byte{[]byte("b")}, 1); err != nil {
		t.Fatal(err)
	}
	st, err = next.Open(t.Context(), "c", 2, "next", Settings{Mode: translog.PerSync}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings.Mode != translog.CreateOnly {
		t.Errorf("successor runs %v, want the shard's create_only", st.Settings.Mode)
	}
	if st.Restore.Gen != 2 || st.Restore.NextSeqNo != 2 {
		t.Errorf("successor restore point %+v, want both acknowledged ops", st.Restore)
	}
	if _, err := dst.Append(t.Context(), "c", [][]byte{[]byte("late")}, 1); err == nil {
		t.Fatal("the deposed create-only target acknowledged an append after the next term opened")
	}
}

// Observe mode acknowledges what per-sync fencing would have failed, and
// says so: on the ack, in status and in the writer's counters; a
// successor's open (its poison) still stops the writer.
func TestObserveModeReportsInsteadOfFailing(t *testing.T) {
	store := mem.New()
	s, err := New(t.Context(), store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	if _, err := s.Open(t.Context(), "o", 1, "a1", Settings{Mode: translog.Observe}, nil); err != nil {
		t.Fatal(err)
	}
	ack, err := s.Append(t.Context(), "o", [][]byte{[]byte("a")}, 1)
	if err != nil || ack.FencingObserved != "" {
		t.Fatalf("append before any successor: %+v, %v", ack, err)
	}
	sub, err := blobstore.Sub(store, "o")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fence.Claim(t.Context(), sub, "o", 2, "successor"); err != nil {
		t.Fatal(err)
	}
	ack, err = s.Append(t.Context(), "o", [][]byte{[]byte("b")}, 1)
	if err != nil || ack.FencingObserved == "" {
		t.Fatalf("append after a successor's claim: %+v, %v; want acknowledged with the observed fencing", ack, err)
	}
	st, err := s.Status("o")
	if err != nil {
		t.Fatal(err)
	}
	if st.FencingObserved == "" || st.Stats.FencingObserved != 1 || st.Fenced || st.Settings.Mode != translog.Observe {
		t.Fatalf("status %+v: want the observed fencing reported, one observed sync, not fenced", st)
	}
	// The writer goes on: the status does not tell it to stop.
	if !strings.Contains(st.FencingObserved, "successor term 2") || strings.Contains(st.FencingObserved, "must stop") {
		t.Fatalf("status reports the observed fencing as %q: want the refused CAS and its successor, without the instruction to stop", st.FencingObserved)
	}
	next, err := New(t.Context(), store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = next.Shutdown(context.Background()) })
	if _, err := next.Open(t.Context(), "o", 3, "a3", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(t.Context(), "o", [][]byte{[]byte("late")}, 1); err == nil {
		t.Fatal("the observe-mode writer acknowledged an append onto the successor's poison")
	}
}
