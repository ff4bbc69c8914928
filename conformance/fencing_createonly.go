package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// The create-only checks run every writer of the shard in
// translog.CreateOnly: a sync sends no fence CAS, so the md create-if-absent
// and the successor's poison are the only fence (a background read of the
// fence key stops a writer that lost the term, docs/PROTOCOL.md).

// newCreateOnlyEnv is newFencingEnv for a shard created in create_only
// mode; it fails the check unless the store holds that mode once the first
// writer opened, so a check never silently runs per_sync.
func newCreateOnlyEnv(t T, c *blobstore.Container) *fencingEnv {
	e := newFencingEnv(t, c)
	e.mode = translog.CreateOnly
	return e
}

func (e *fencingEnv) expectCreateOnly() {
	e.t.Helper()
	f, _, found, err := seal.ReadFencing(e.ctx, e.store, fencingShard, e.sealOptions())
	switch {
	case err != nil || !found:
		unstaged(e.t, "read the shard's fencing settings: found %v, %v", found, err)
	case f.Disabled || f.Mode != translog.CreateOnly:
		unstaged(e.t, "the shard stores fencing %s, want create_only: the check would not exercise create-only mode", f)
	}
}

// checkCreateOnlyZombie: a create-only term 1 appends from several clients
// while term 2 claims and seals. Whatever term 1 acknowledged is in term 2's
// restore point, and nothing it is asked after term 2's open returned is
// acknowledged.
func checkCreateOnlyZombie(t T, c *blobstore.Container) {
	e := newCreateOnlyEnv(t, c)
	z := e.actor("term 1")
	sh1 := e.mustOpen(z, 1, "a1", nil)
	e.expectCreateOnly()
	e.mustAppend(sh1.Writer, "term 1", "z-first")

	var opened atomic.Bool // term 2's open returned
	var late []appended    // acknowledged appends asked after it did
	var mu sync.Mutex
	var wg sync.WaitGroup
	acks := make(chan struct{}, 1024)
	for g := range 4 {
		wg.Go(func() {
			for i := 0; e.ctx.Err() == nil; i++ {
				after := opened.Load()
				op := fmt.Sprintf("z-%d-%d", g, i)
				ack, err := e.appendOp(sh1.Writer, "term 1", op)
				if err != nil {
					return
				}
				if after {
					mu.Lock()
					late = append(late, appended{op, ack, nil})
					mu.Unlock()
				}
				select {
				case acks <- struct{}{}:
				default:
				}
			}
		})
	}
	// Let term 1 get going, then claim beside it.
	for range 8 {
		select {
		case <-acks:
		case <-e.ctx.Done():
			unstaged(t, "term 1 acknowledged nothing (%v)", e.ctx.Err())
		}
	}
	s := e.actor("term 2")
	col := &collector{}
	sh2, err := e.open(s, 2, "a2", col)
	opened.Store(true)
	if err != nil {
		violated(t, HigherTermPrevails, "term 2 could not open beside a live create-only term 1: %v", err)
		wg.Wait()
		return
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	receive(e, done, "term 1's clients (a create-only writer must stop once term 2's poison or fence check finds it superseded)")

	rp := sh2.Restore()
	restored := map[string]bool{}
	for _, x := range col.all() {
		restored[x.op] = true
	}
	zacks := e.ackedBy("term 1")
	for _, a := range zacks {
		if !restored[a.op] || a.gen > rp.Gen {
			violated(t, NoAckedWriteLoss, "create-only term 1 acknowledged %q at gen %d, but term 2's restore point (term %d gen %d, poison at %s) does not hold it: with no CAS on the sync path, the poison's create-if-absent must fail on a generation term 1 created, and term 1's create must fail on the poison", a.op, a.gen, rp.Term, rp.Gen, sh2.Seal.Marker.Poisoned)
		}
	}
	for _, a := range late {
		violated(t, SingleAcker, "create-only term 1 acknowledged %q at gen %d, asked after term 2's open had returned (term 2 poisoned %s)", a.op, a.ack.Gen, sh2.Seal.Marker.Poisoned)
	}
	e.expectFenced(sh1.Writer, "term 1", "z-after", SingleAcker, "term 2 had opened and poisoned term 1's next generation")
	if st := sh1.Writer.Stats(); st.CASWrites != 0 {
		t.Errorf("create-only term 1 sent %d fence CASes from its syncs, want none", st.CASWrites)
	}
	t.Logf("term 1 acknowledged %d ops; term 2 restored term %d gen %d and poisoned %s", len(zacks), rp.Term, rp.Gen, sh2.Seal.Marker.Poisoned)
	e.mustAppend(sh2.Writer, "term 2", "s-1")
	e.mustAppend(sh2.Writer, "term 2", "s-2")
	e.verifyLineage(staleWriterHint)
}

// checkCreateOnlyMDRace: a create-only term 1's md create for its next
// generation is held on the wire while term 2 seals. In the first round the
// poison lands first and term 1 must acknowledge nothing; in the second the
// md lands while the poison create is on the wire, and term 2 must restore
// that generation, whether term 1 got to acknowledge it or not.
func checkCreateOnlyMDRace(t T, c *blobstore.Container) {
	twoRounds(t, c, "the poison lands first", "the md lands first", func(t T, c *blobstore.Container, second bool) {
		createOnlyMDRaceRound(t, c, second)
	})
}

// twoRounds runs round(t, c, false) and then round(t, c, true), each under
// its own prefix of c and with its messages ending in the round and how it
// is staged (first, second).
func twoRounds(t T, c *blobstore.Container, first, second string, round func(t T, c *blobstore.Container, second bool)) {
	for i, how := range []string{first, second} {
		sub, err := blobstore.Sub(c, fmt.Sprintf("round-%d", i+1))
		if err != nil {
			unstaged(t, "round prefix: %v", err)
		}
		round(&suffixT{T: t, suffix: fmt.Sprintf(" (round %d: %s)", i+1, how)}, sub, i == 1)
	}
}

func createOnlyMDRaceRound(t T, c *blobstore.Container, mdFirst bool) {
	e := newCreateOnlyEnv(t, c)
	z := e.actor("term 1")
	sh1 := e.mustOpen(z, 1, "a1", nil)
	e.expectCreateOnly()
	e.mustAppend(sh1.Writer, "term 1", "z-1")
	e.mustAppend(sh1.Writer, "term 1", "z-2")
	gen := sh1.Writer.NextGen()
	gap := layout.MDKey(1, gen)
	hz := z.hold(fmt.Sprintf("term 1's md create for gen %d", gen), request(blobstore.OpCreateIfAbsent, gap))
	pz := e.appendAsync(sh1.Writer, "term 1", "z-3")
	e.await(hz)

	s := e.actor("term 2")
	col := &collector{}
	var sh2 *successor
	if !mdFirst {
		sh := e.mustOpen(s, 2, "a2", col)
		sh2 = &successor{rp: sh.Restore(), poisoned: sh.Seal.Marker.Poisoned, w: sh.Writer}
		hz.release()
		e.expectRefused(receive(e, pz, "term 1's append"), "term 1", NoAckedWriteLoss, 0,
			fmt.Sprintf("its md create for gen %d landed after term 2's seal had put a poison there: the store let a create-if-absent replace an existing object (If-None-Match: * not enforced), and create-only mode has no CAS to stop it", gen))
		e.expectPoison(gap, 2, NoAckedWriteLoss, "after term 1's md create landed,")
		if sh2.rp.Term != 1 || sh2.rp.Gen != gen-1 || sh2.poisoned != gap {
			t.Errorf("term 2 sealed at term %d gen %d with its poison at %q; want term 1 gen %d cut by a poison at %s (term 1's md of gen %d was held on the wire)", sh2.rp.Term, sh2.rp.Gen, sh2.poisoned, gen-1, gap, gen)
		}
	} else {
		hs := s.hold(fmt.Sprintf("term 2's poison create at gen %d", gen), request(blobstore.OpCreateIfAbsent, gap))
		// Term 1's next fence check is held too: it would find term 1's
		// key swept and fence it before its md lands, which is the other
		// order (round 1).
		hc := z.hold("term 1's next fence check", request(blobstore.OpGet, layout.FenceKey(1)))
		ps := e.openAsync(s, 2, "a2", col)
		e.await(hs) // term 2 swept term 1's key and is about to poison gen
		hz.release()
		rz := receive(e, pz, "term 1's append")
		hc.release()
		landed := false
		if obj, err := e.store.Get(e.ctx, gap); err == nil {
			md, derr := translog.DecodeMD(fencingShard, gap, obj.Body)
			landed = derr == nil && md.Kind == translog.KindSync && md.Term == 1
		} else if !errors.Is(err, blobstore.ErrNotFound) {
			unstaged(t, "read %s: %v", gap, err)
		}
		if !landed {
			if rz.err == nil {
				violated(t, NoAckedWriteLoss, "term 1 acknowledged %q at gen %d, but its md is not stored at %s", "z-3", gen, gap)
			}
			unstaged(t, "term 1's md create for gen %d did not land before term 2's poison create (its append ended with %v): the md-first order was not staged", gen, rz.err)
		}
		hs.release()
		r2 := receive(e, ps, "term 2's open")
		if r2.err != nil {
			violated(t, HigherTermPrevails, "term 2 could not open after its poison create found term 1's md: %v", r2.err)
			return
		}
		sh2 = &successor{rp: r2.sh.Restore(), poisoned: r2.sh.Seal.Marker.Poisoned, w: r2.sh.Writer}
		// The md landed before the poison: term 1 may have acknowledged
		// it (term 2 cannot tell), so term 2 must restore it either way.
		if sh2.rp.Term != 1 || sh2.rp.Gen < gen || !col.has("z-3") {
			violated(t, NoAckedWriteLoss, "term 1's md of gen %d (holding %q) landed before term 2's poison create, but term 2 restored up to term %d gen %d without it: a create-only writer acknowledges once its md is stored, so the poison create must fail on it and the seal go on (a create that overwrites, If-None-Match: * not enforced, replaces it with the poison; a LIST that lags hides it)", gen, "z-3", sh2.rp.Term, sh2.rp.Gen)
		}
		switch {
		case rz.err == nil:
			t.Logf("term 1 acknowledged z-3 at gen %d before it learned of term 2", rz.ack.Gen)
		case errors.Is(rz.err, fence.ErrFenced):
			t.Logf("term 1 was fenced before it acknowledged gen %d (%v)", gen, rz.err)
		default:
			t.Errorf("term 1's append of z-3 ended with %v, neither acknowledged nor fenced", rz.err)
		}
		if want := layout.MDKey(1, gen+1); sh2.poisoned != want {
			t.Errorf("term 2 poisoned %q after including gen %d; want %s", sh2.poisoned, gen, want)
		}
	}
	e.expectFenced(sh1.Writer, "term 1", "z-4", SingleAcker, "term 2 had opened")
	e.mustAppend(sh2.w, "term 2", "s-1")
	e.verifyLineage(staleWriterHint)
}

// successor is what a create-only race round needs of term 2's open.
type successor struct {
	rp       seal.RestorePoint
	poisoned string
	w        *translog.Writer
}

// checkCreateOnlyRequests: a create-only writer alone on the shard sends one
// write per sync, its md create, and no CAS; its fence checks are reads.
func checkCreateOnlyRequests(t T, c *blobstore.Container) {
	e := newCreateOnlyEnv(t, c)
	p := e.actor("term 1")
	sh := e.mustOpen(p, 1, "a1", nil)
	e.expectCreateOnly()
	ops := []blobstore.Op{blobstore.OpCreateIfAbsent, blobstore.OpCompareAndSwap, blobstore.OpPut, blobstore.OpDelete, blobstore.OpDeleteIfMatch, blobstore.OpGet}
	count := func() map[blobstore.Op]int64 {
		m := map[blobstore.Op]int64{}
		for _, op := range ops {
			m[op] = p.f.Requests(op)
		}
		return m
	}
	before, st0 := count(), sh.Writer.Stats()
	const syncs = 20
	for i := range syncs {
		e.mustAppend(sh.Writer, "term 1", fmt.Sprintf("r-%d", i))
	}
	after, st := count(), sh.Writer.Stats()
	d := func(op blobstore.Op) int64 { return after[op] - before[op] }
	if n := st.Syncs - st0.Syncs; n != syncs {
		unstaged(t, "%d appends made %d syncs, want one each (no gather delay)", syncs, n)
	}
	if d(blobstore.OpCreateIfAbsent) != syncs || d(blobstore.OpCompareAndSwap) != 0 || d(blobstore.OpPut) != 0 || d(blobstore.OpDelete) != 0 || d(blobstore.OpDeleteIfMatch) != 0 {
		t.Errorf("%d create-only syncs sent %d creates, %d CAS, %d PUT, %d deletes; want %d creates (the md) and nothing else that writes", syncs,
			d(blobstore.OpCreateIfAbsent), d(blobstore.OpCompareAndSwap), d(blobstore.OpPut), d(blobstore.OpDelete)+d(blobstore.OpDeleteIfMatch), syncs)
	}
	if st.CASWrites != 0 {
		t.Errorf("the create-only writer counts %d fence CASes from its syncs, want none", st.CASWrites)
	}
	// A check started last may not have sent its GET yet.
	if checks := st.FenceChecks - st0.FenceChecks; checks == 0 || d(blobstore.OpGet) > checks+1 {
		t.Errorf("the create-only writer made %d fence checks and sent %d GETs during %d syncs; want at least one check, each one read of the fence key", checks, d(blobstore.OpGet), syncs)
	}
	t.Logf("%d syncs: %d creates, %d GETs (%d fence checks), no CAS", syncs, d(blobstore.OpCreateIfAbsent), d(blobstore.OpGet), st.FenceChecks-st0.FenceChecks)
	e.verifyLineage(staleWriterHint)
}

// suffixT says which round a message is about at its end, so a failure
// still starts with the invariant's name.
type suffixT struct {
	T
	suffix string
}

func (s *suffixT) Errorf(format string, args ...any) { s.T.Errorf(format+s.suffix, args...) }
func (s *suffixT) Fatalf(format string, args ...any) { s.T.Fatalf(format+s.suffix, args...) }
func (s *suffixT) Logf(format string, args ...any)   { s.T.Logf(format+s.suffix, args...) }

// checkCreateOnlyHandoffRace: in create_only mode the target's writer sends
// no CAS, so relocation.Adopt CASes the key once and that CAS races an
// aborting source's revert. In the first round the adopt's CAS lands first
// and the revert must stand down; in the second the revert lands while the
// adopt's CAS is held on the wire, and the adopt must fail fenced. Never do
// both acknowledge, and nothing acknowledged is lost.
func checkCreateOnlyHandoffRace(t T, c *blobstore.Container) {
	twoRounds(t, c, "the adopt's CAS lands first", "the revert lands first", func(t T, c *blobstore.Container, second bool) {
		createOnlyHandoffRound(t, c, !second)
	})
}

func createOnlyHandoffRound(t T, c *blobstore.Container, adoptFirst bool) {
	e := newCreateOnlyEnv(t, c)
	sa := e.actor("the source")
	sh := e.mustOpen(sa, 1, "src", nil)
	e.expectCreateOnly()
	e.mustAppend(sh.Writer, "the source", "a")
	src, hc := e.handoff(sa, sh)
	d := e.actor("the target")
	type adopted struct {
		w   *translog.Writer
		err error
	}
	adopt := func() <-chan adopted {
		ch := make(chan adopted, 1)
		go func() {
			_, w, err := relocation.Adopt(e.ctx, d.store, "dst", hc, relocation.AdoptOptions{Backoff: fencingBackoff(), Clock: e.clock, Writer: e.writerOptions()})
			if err == nil {
				e.track(w)
			}
			ch <- adopted{w, err}
		}()
		return ch
	}
	if adoptFirst {
		ra := receive(e, adopt(), "the adopt")
		if ra.err != nil {
			violated(t, NoSpuriousFencing, "the target could not adopt the handoff it was given: %v", ra.err)
			return
		}
		e.revertStandsDown(src, "after the target adopted", "in create_only mode the adopt's CAS must move the key off the transfer's token (or the store accepted a stale If-Match), else the source resumes beside a target whose syncs send no CAS")
		e.mustAppend(ra.w, "the target", "t-1")
		e.expectFenced(src.Writer(), "the source", "b-late", SingleAcker, "the target had adopted the handoff")
		e.mustAppend(ra.w, "the target", "t-2")
	} else {
		h := d.hold("the adopt's fence CAS", request(blobstore.OpCompareAndSwap, layout.FenceKey(1)))
		pa := adopt()
		select {
		case <-h.arrived:
		case ra := <-pa:
			violated(t, SingleAcker, "the adopt returned (%v) without a CAS on the fence key: in create_only mode the target's syncs send none, so an aborting source's revert would find the transfer's token in place and resume beside the target", ra.err)
			return
		case <-e.ctx.Done():
			unstaged(t, "the adopt's fence CAS was never sent (%v)", context.Cause(e.ctx))
		}
		e.revertResumes(src, h, "the adopt's CAS")
		ra := receive(e, pa, "the adopt")
		rs, serr := e.appendOp(src.Writer(), "the source", "b")
		switch {
		case ra.err == nil:
			ack, terr := e.appendOp(ra.w, "the target", "t")
			if terr == nil {
				violated(t, SingleAcker, "the target adopted and acknowledged %q at gen %d though the source's revert had moved the key off the transfer's token: the store accepted a stale If-Match", "t", ack.Gen)
			}
			if terr == nil && serr == nil {
				violated(t, SingleAcker, "after the revert both the target (%q at gen %d) and the source (%q at gen %d) acknowledged in term 1", "t", ack.Gen, "b", rs.Gen)
			}
		case !errors.Is(ra.err, fence.ErrFenced):
			t.Errorf("the adopt after the revert ended with %v, want fenced", ra.err)
		}
		if serr != nil {
			violated(t, NoSpuriousFencing, "the source, which reverted before the target's CAS landed, could not append: %v", serr)
		}
	}
	e.verifyLineage(staleWriterHint)
}
