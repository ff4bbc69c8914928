package relocation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/translog"
)

const shard = "s1"

var fastRetry = fence.Backoff{Initial: 100 * time.Microsecond, Max: 2 * time.Millisecond, Attempts: 8}

func backends() map[string]func(t *testing.T) *faulty.Container {
	return map[string]func(t *testing.T) *faulty.Container{
		"mem": func(t *testing.T) *faulty.Container { return faulty.New(mem.New(), 1) },
		"fs": func(t *testing.T) *faulty.Container {
			c, err := fs.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return faulty.New(c, 1)
		},
		"faulty": func(t *testing.T) *faulty.Container {
			f := faulty.New(mem.New(), 5)
			f.MustAdd(faulty.Rule{Latency: faulty.Uniform(0, 200*time.Microsecond)})
			f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap, blobstore.OpCreateIfAbsent), Fault: faulty.LostResponse, Probability: 0.1})
			f.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Fault: faulty.Conflict, Probability: 0.05})
			return f
		},
	}
}

type scenario struct {
	name string
	run  func(t *testing.T, store *faulty.Container)
}

// scenarios are the relocation scenarios every backend runs.
func scenarios() []scenario {
	return []scenario{
		{"TransferContinuesTheChainAtTheTarget", scenarioTransferContinuesTheChainAtTheTarget},
		{"AbortThenResume", scenarioAbortThenResume},
		{"AbortAfterTargetAdoptedButBeforeItWroteResumesTheSource", scenarioAbortAfterTargetAdoptedButBeforeItWroteResumesTheSource},
		{"TargetMDRacingTheRevertFencesBothWithoutLoss", scenarioTargetMDRacingTheRevertFencesBothWithoutLoss},
		{"AbortAfterTargetWroteStandsDown", scenarioAbortAfterTargetWroteStandsDown},
	}
}

// createOnlyScenarios are the scenarios of a create-only shard: the same
// transfer, resume and stand-down, but the target's Adopt CASes the key
// once (its syncs send none), so an adopted target owns the term whether
// or not it wrote, and a revert that landed first fences the adopt.
func createOnlyScenarios() []scenario {
	return []scenario{
		{"TransferContinuesTheChainAtTheTarget", scenarioTransferContinuesTheChainAtTheTarget},
		{"AbortThenResume", scenarioAbortThenResume},
		{"AbortAfterTargetWroteStandsDown", scenarioAbortAfterTargetWroteStandsDown},
		{"AbortAfterAdoptStandsDown", scenarioCreateOnlyAbortAfterAdoptStandsDown},
		{"RevertBeforeAdoptFencesTheTarget", scenarioCreateOnlyRevertBeforeAdoptFencesTheTarget},
	}
}

// mode is the fencing mode the scenarios' shard is created with (0: the
// default, per_sync).
var mode translog.FencingMode

func TestScenarios(t *testing.T) {
	run := func(t *testing.T, scs []scenario) {
		for _, sc := range scs {
			t.Run(sc.name, func(t *testing.T) {
				for _, name := range []string{"mem", "fs", "faulty"} {
					t.Run(name, func(t *testing.T) { sc.run(t, backends()[name](t)) })
				}
			})
		}
	}
	t.Run("per_sync", func(t *testing.T) { run(t, scenarios()) })
	t.Run("create_only", func(t *testing.T) {
		mode = translog.CreateOnly
		defer func() { mode = 0 }()
		run(t, createOnlyScenarios())
	})
}

func writerOpts() translog.Options { return translog.Options{Backoff: fastRetry, FencingMode: mode} }

// In create-only mode the target's Adopt CASes the key: the source's
// revert then finds the term taken and stands down, though the target has
// not written yet; the target goes on, and nothing is lost.
func scenarioCreateOnlyAbortAfterAdoptStandsDown(t *testing.T, store *faulty.Container) {
	src := source(t, store)
	mustApp(t, src.Writer(), "a")
	hc, err := src.Handoff(context.Background(), "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := adopt(t, store, hc)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if out, err := src.Abort(context.Background()); err != nil || out != relocation.StoodDown {
		t.Fatalf("abort after a create-only adopt: %v %v, want stood down", out, err)
	}
	mustApp(t, w, "b")
	_ = w.Close(context.Background())
	if got := fmt.Sprint(restored(t, store, 2)); got != "[a b]" {
		t.Fatalf("restored %s", got)
	}
}

// A revert that landed before the target's adopt: the adopt's CAS finds
// the key back with the source and the target is fenced before it writes;
// the resumed source goes on.
func scenarioCreateOnlyRevertBeforeAdoptFencesTheTarget(t *testing.T, store *faulty.Container) {
	src := source(t, store)
	mustApp(t, src.Writer(), "a")
	hc, err := src.Handoff(context.Background(), "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := src.Abort(context.Background()); err != nil || out != relocation.Resumed {
		t.Fatalf("abort before the adopt: %v %v", out, err)
	}
	if _, _, err := adopt(t, store, hc); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("adopt after the revert: %v, want fenced", err)
	}
	mustApp(t, src.Writer(), "b")
	_ = src.Writer().Close(context.Background())
	if got := fmt.Sprint(restored(t, store, 2)); got != "[a b]" {
		t.Fatalf("restored %s", got)
	}
}

// source opens term 1 for allocation "src" through recovery and wraps it.
func source(t *testing.T, store *faulty.Container) *relocation.Source {
	t.Helper()
	o := recovery.Options{Clock: clock.NewAuto(), Backoff: fastRetry, Writer: writerOpts()}
	sh, err := recovery.Open(context.Background(), store.Container, shard, 1, "src", o)
	if err != nil {
		t.Fatalf("open source: %v", err)
	}
	src := relocation.NewSource(store.Container, sh.Chain, sh.Writer, o.Writer)
	t.Cleanup(func() { _ = src.Writer().Close(context.Background()) })
	return src
}

func app(w *translog.Writer, op string) (translog.Ack, error) {
	return w.Append(context.Background(), [][]byte{[]byte(op)})
}

func mustApp(t *testing.T, w *translog.Writer, op string) translog.Ack {
	t.Helper()
	a, err := app(w, op)
	if err != nil {
		t.Fatalf("append %q: %v", op, err)
	}
	return a
}

func adopt(t *testing.T, store *faulty.Container, hc relocation.HandoffContext) (*fence.Chain, *translog.Writer, error) {
	return adoptWith(t, store, hc, writerOpts())
}

func adoptWith(t *testing.T, store *faulty.Container, hc relocation.HandoffContext, wo translog.Options) (*fence.Chain, *translog.Writer, error) {
	t.Helper()
	b, err := hc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := relocation.Unmarshal(b)
	if err != nil || got != hc {
		t.Fatalf("context round trip: %+v (%v), want %+v", got, err, hc)
	}
	c, w, err := relocation.Adopt(context.Background(), store.Container, "dst", got, relocation.AdoptOptions{Backoff: fastRetry, Writer: wo})
	if w != nil {
		t.Cleanup(func() { _ = w.Close(context.Background()) })
	}
	return c, w, err
}

// restored recovers the shard under term and returns its ops in order.
func restored(t *testing.T, store *faulty.Container, term int64) []string {
	t.Helper()
	var ops []string
	o := recovery.Options{Clock: clock.NewAuto(), Backoff: fastRetry, Writer: writerOpts(),
		Apply: func(_ context.Context, b translog.Batch) error {
			for _, op := range b.Ops {
				ops = append(ops, string(op))
			}
			return nil
		}}
	sh, err := recovery.Open(context.Background(), store.Container, shard, term, fmt.Sprintf("r%d", term), o)
	if err != nil {
		t.Fatalf("recover at term %d: %v", term, err)
	}
	_ = sh.Writer.Close(context.Background())
	return ops
}

func scenarioTransferContinuesTheChainAtTheTarget(t *testing.T, store *faulty.Container) {
	src := source(t, store)
	old := src.Writer()
	mustApp(t, old, "a")
	mustApp(t, old, "b")
	hc, err := src.Handoff(context.Background(), "dst", "node-2")
	if err != nil {
		t.Fatalf("handoff: %v", err)
	}
	if hc.Gen != 2 || hc.NextSeqNo != 2 || hc.Term != 1 || hc.Source != "src" {
		t.Fatalf("handoff context %+v", hc)
	}
	if _, err := app(old, "late"); !errors.Is(err, translog.ErrClosed) {
		t.Fatalf("source append after handoff: %v, want closed", err)
	}
	_, w, err := adopt(t, store, hc)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if ack := mustApp(t, w, "c"); ack.Gen != 3 || ack.FirstSeqNo != 2 || ack.Term != 1 {
		t.Fatalf("target's first ack %+v, want term 1 gen 3 seq 2", ack)
	}
	_ = w.Close(context.Background())
	if got := fmt.Sprint(restored(t, store, 2)); got != "[a b c]" {
		t.Fatalf("restored %s", got)
	}
}

func scenarioAbortThenResume(t *testing.T, store *faulty.Container) {
	src := source(t, store)
	mustApp(t, src.Writer(), "a")
	hc, err := src.Handoff(context.Background(), "dst", "")
	if err != nil {
		t.Fatalf("handoff: %v", err)
	}
	out, err := src.Abort(context.Background())
	if err != nil || out != relocation.Resumed {
		t.Fatalf("abort: %v %v, want resumed", out, err)
	}
	if ack := mustApp(t, src.Writer(), "b"); ack.Gen != 2 || ack.FirstSeqNo != 1 {
		t.Fatalf("resumed ack %+v", ack)
	}
	// The context is stale now: the target must not write.
	if _, _, err := adopt(t, store, hc); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("adopt after revert: %v, want fenced", err)
	}
	_ = src.Writer().Close(context.Background())
	if got := fmt.Sprint(restored(t, store, 2)); got != "[a b]" {
		t.Fatalf("restored %s", got)
	}
}

func scenarioAbortAfterTargetAdoptedButBeforeItWroteResumesTheSource(t *testing.T, store *faulty.Container) {
	src := source(t, store)
	mustApp(t, src.Writer(), "a")
	hc, err := src.Handoff(context.Background(), "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := adopt(t, store, hc)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if out, err := src.Abort(context.Background()); err != nil || out != relocation.Resumed {
		t.Fatalf("abort: %v %v", out, err)
	}
	mustApp(t, src.Writer(), "b")
	if _, err := app(w, "t"); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("target append after the revert: %v, want fenced (one acker)", err)
	}
	mustApp(t, src.Writer(), "c")
}

// The target's first sync races the revert: its md lands but its CAS
// fails. That generation is taken in the term's create-only log, so the
// resumed source is fenced when it reaches it. Nobody acknowledged the
// target's op, nothing acknowledged is lost, and the shard continues under
// a new term, whose restore point holds every acknowledged op.
func scenarioTargetMDRacingTheRevertFencesBothWithoutLoss(t *testing.T, store *faulty.Container) {
	src := source(t, store)
	mustApp(t, src.Writer(), "a")
	hc, err := src.Handoff(context.Background(), "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	// Sequenced: the target's md lands before its CAS is refused, the
	// interleaving the concurrent order reaches only sometimes.
	wo := writerOpts()
	wo.AckOrder = translog.Sequenced
	_, w, err := adoptWith(t, store, hc, wo)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if out, err := src.Abort(context.Background()); err != nil || out != relocation.Resumed {
		t.Fatalf("abort: %v %v", out, err)
	}
	if _, err := app(w, "t"); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("target append after the revert: %v, want fenced", err)
	}
	if _, err := app(src.Writer(), "b"); !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("source append over the target's md: %v, want fenced", err)
	}
	got := restored(t, store, 2)
	if len(got) == 0 || got[0] != "a" {
		t.Fatalf("restored %q, want the acknowledged op a first", got)
	}
}

func scenarioAbortAfterTargetWroteStandsDown(t *testing.T, store *faulty.Container) {
	src := source(t, store)
	mustApp(t, src.Writer(), "a")
	hc, err := src.Handoff(context.Background(), "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := adopt(t, store, hc)
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	mustApp(t, w, "b")
	out, err := src.Abort(context.Background())
	if err != nil || out != relocation.StoodDown {
		t.Fatalf("abort after the target wrote: %v %v, want stood down without error", out, err)
	}
	mustApp(t, w, "c")
	_ = w.Close(context.Background())
	if got := fmt.Sprint(restored(t, store, 2)); got != "[a b c]" {
		t.Fatalf("restored %s", got)
	}
}

func TestLostResponsesOnTransferAndRevertAreSettledByContent(t *testing.T) {
	for _, name := range []string{"mem", "fs"} {
		t.Run(name, func(t *testing.T) {
			store := backends()[name](t)
			src := source(t, store)
			mustApp(t, src.Writer(), "a")
			lost := store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Prefix: layout.FenceDir, Fault: faulty.LostResponse, Times: 1})
			hc, err := src.Handoff(context.Background(), "dst", "")
			if err != nil {
				t.Fatalf("handoff with a lost response: %v", err)
			}
			if store.Fired(lost) != 1 {
				t.Fatal("the transfer's response was not lost: the test checked nothing")
			}
			lost = store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Prefix: layout.FenceDir, Fault: faulty.LostResponse, Times: 1})
			if out, err := src.Abort(context.Background()); err != nil || out != relocation.Resumed {
				t.Fatalf("abort with a lost revert response: %v %v", out, err)
			}
			if store.Fired(lost) != 1 {
				t.Fatal("the revert's response was not lost")
			}
			mustApp(t, src.Writer(), "b")
			if _, _, err := adopt(t, store, hc); !errors.Is(err, fence.ErrFenced) {
				t.Fatalf("adopt after the revert: %v", err)
			}
			// A lost transfer response, then a target that already wrote:
			// the revert stands down.
			lost = store.MustAdd(faulty.Rule{Ops: faulty.Ops(blobstore.OpCompareAndSwap), Prefix: layout.FenceDir, Fault: faulty.LostResponse, Times: 1})
			hc, err = src.Handoff(context.Background(), "dst", "")
			if err != nil {
				t.Fatalf("second handoff: %v", err)
			}
			if store.Fired(lost) != 1 {
				t.Fatal("the second transfer's response was not lost")
			}
			_, w, err := adopt(t, store, hc)
			if err != nil {
				t.Fatalf("adopt: %v", err)
			}
			mustApp(t, w, "c")
			if out, err := src.Abort(context.Background()); err != nil || out != relocation.StoodDown {
				t.Fatalf("abort: %v %v, want stood down", out, err)
			}
			_ = w.Close(context.Background())
			if got := fmt.Sprint(restored(t, store, 2)); got != "[a b c]" {
				t.Fatalf("restored %s", got)
			}
		})
	}
}

func TestHandoffContextRejectsBadBytes(t *testing.T) {
	for _, b := range []string{"", "{}", `{"format":"shardfence.handoff","version":9}`, `{"format":"shardfence.handoff","version":1,"shard":"s","term":0}`} {
		if _, err := relocation.Unmarshal([]byte(b)); err == nil {
			t.Errorf("Unmarshal(%q) accepted", b)
		}
	}
	if _, _, err := relocation.Adopt(context.Background(), mem.New(), "other", relocation.HandoffContext{Shard: shard, Term: 1, Source: "a", Target: "b", Token: "x"}, relocation.AdoptOptions{}); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Errorf("adopt by the wrong allocation: %v", err)
	}
}

// A context whose generation is not where the fence key says the source's
// log ends is refused before the target writes: one past the end would
// leave a hole every later seal poisons (the checker's wrong-handoff-gap),
// one before it would write over the source's generations.
func TestAdoptRefusesAContextOffTheEndOfTheLog(t *testing.T) {
	t.Run("one generation past", func(t *testing.T) { refuseThenAdopt(t, func(hc *relocation.HandoffContext) { hc.Gen++ }, "") })
	t.Run("one generation before", func(t *testing.T) { refuseThenAdopt(t, func(hc *relocation.HandoffContext) { hc.Gen-- }, "") })
}

// A context whose next sequence number disagrees with the md of its last
// generation is refused (the target would number its ops over the log's or
// leave a gap), and the true context still adopts with nothing lost.
func TestAdoptRefusesAContextWhoseNextSeqNoDisagreesWithTheLog(t *testing.T) {
	t.Run("one op past", func(t *testing.T) {
		refuseThenAdopt(t, func(hc *relocation.HandoffContext) { hc.NextSeqNo++ }, "sequence number")
	})
	t.Run("one op before", func(t *testing.T) {
		refuseThenAdopt(t, func(hc *relocation.HandoffContext) { hc.NextSeqNo-- }, "sequence number")
	})
}

// refuseThenAdopt hands a shard holding a and b off, has the target adopt
// the context as edit changes it, which must fail with ErrPositionMismatch
// (its message naming want, when set) and not as fencing, then adopts the
// true context and checks that nothing was lost.
func refuseThenAdopt(t *testing.T, edit func(*relocation.HandoffContext), want string) {
	t.Helper()
	store := faulty.New(mem.New(), 1)
	src := source(t, store)
	mustApp(t, src.Writer(), "a")
	mustApp(t, src.Writer(), "b")
	hc, err := src.Handoff(context.Background(), "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	bad := hc
	edit(&bad)
	_, _, err = adopt(t, store, bad)
	if !errors.Is(err, relocation.ErrPositionMismatch) || errors.Is(err, fence.ErrFenced) || !strings.Contains(err.Error(), want) {
		t.Fatalf("adopt of %+v: %v, want ErrPositionMismatch naming %q", bad, err, want)
	}
	// The true context still adopts, and nothing was lost.
	_, w, err := adopt(t, store, hc)
	if err != nil {
		t.Fatal(err)
	}
	mustApp(t, w, "c")
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(restored(t, store, 2)); got != "[a b c]" {
		t.Fatalf("restored %s, want [a b c]", got)
	}
}

// In lease mode the fence key's generation lags the log; the transfer
// records where the log ends, so the context matches.
func TestAdoptAfterALeaseModeSource(t *testing.T) {
	store := faulty.New(mem.New(), 1)
	o := recovery.Options{Clock: clock.NewAuto(), Backoff: fastRetry, Writer: writerOpts()}
	o.Writer.FencingMode, o.Writer.LeaseInterval = translog.Lease, time.Minute
	sh, err := recovery.Open(context.Background(), store.Container, shard, 1, "src", o)
	if err != nil {
		t.Fatal(err)
	}
	src := relocation.NewSource(store.Container, sh.Chain, sh.Writer, o.Writer)
	for _, op := range []string{"a", "b", "c"} {
		mustApp(t, src.Writer(), op)
	}
	if g := sh.Chain.State().Record.Gen; g >= 3 {
		t.Fatalf("the lease-mode key commits generation %d: the test needs it to lag", g)
	}
	hc, err := src.Handoff(context.Background(), "dst", "")
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := adoptWith(t, store, hc, o.Writer)
	if err != nil {
		t.Fatal(err)
	}
	mustApp(t, w, "d")
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
