package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// fencingChecks are the fencing suite, in the order they run.
func fencingChecks() []Check {
	return []Check{
		{Name: "claim-race", Guards: []string{HigherTermPrevails, SingleAcker, NoAckedWriteLoss, FencedTerminal},
			Description: "terms 2, 3, 3 and 4 claim at once beside a live term-1 writer: term 4 opens, the rest end fenced, nothing acknowledged is lost", run: checkClaimRace},
		{Name: "zombie-md-after-seal", Guards: []string{NoAckedWriteLoss, FencedTerminal},
			Description: "a zombie's md create held on the wire while its CAS lands, released after the successor's seal: the poison wins and the zombie acknowledges nothing", run: checkZombieMDAfterSeal},
		{Name: "zombie-md-before-poison", Guards: []string{NoAckedWriteLoss, AckOrder},
			Description: "a zombie's CAS lands while its md is in flight and the md lands while the successor's poison create is on the wire: what the zombie acknowledged is restored", run: checkZombieMDBeforePoison},
		{Name: "lost-responses", Guards: []string{NoSpuriousFencing, NoAckedWriteLoss, HigherTermPrevails},
			Description: "lost responses on claim, settings, marker, md, data, CAS and sweep delete, 409s, refused and lost requests, a dropped sweep delete: no primary is fenced, every op is restored", run: checkLostResponses},
		{Name: "fence-aba", Guards: []string{SingleAcker, FencedTerminal, NoAckedWriteLoss},
			Description: "same-body rewrites of the fence key: a lost claim create landing after the successor's sweep, a token from before a handoff tried after its revert; no stale CAS passes", run: checkFenceABA},
		{Name: "handoff-revert", Guards: []string{SingleAcker, NoSpuriousFencing, NoAckedWriteLoss},
			Description: "transfer, adopt, revert (lost responses on transfer and revert), transfer again; a revert after the target wrote stands down", run: checkHandoffRevert},
		{Name: "handoff-racing-target", Guards: []string{SingleAcker, NoAckedWriteLoss},
			Description: "the target's first sync races the source's revert (its CAS held on the wire, its md landed): never both acknowledge, nothing acknowledged is lost", run: checkHandoffRacingTarget},
		{Name: "gc-beside-zombie", Guards: []string{GCSafety, NoAckedWriteLoss},
			Description: "the successor checkpoints and runs GC while a zombie's md create is on the wire: the poison survives, the zombie's own GC deletes nothing, nothing acknowledged is lost", run: checkGCBesideZombie},
		{Name: "checkpoint-gate", Guards: []string{HigherTermPrevails, NoAckedWriteLoss},
			Description: "a superseded term's checkpoint publish is refused; a checkpoint off the lineage is never restored", run: checkCheckpointGate},
		{Name: "create-only-zombie", Guards: []string{NoAckedWriteLoss, SingleAcker, FencedTerminal},
			Description: "create_only mode: term 2 claims and seals while term 1 appends from four clients with no CAS: all term 1 acknowledged is in term 2's restore point, nothing asked after term 2's open is", run: checkCreateOnlyZombie},
		{Name: "create-only-md-race", Guards: []string{NoAckedWriteLoss, SingleAcker, AckOrder},
			Description: "create_only mode: term 1's md create held on the wire, released after term 2's poison landed, then while the poison create is on the wire: whichever lands first, nothing acknowledged is lost", run: checkCreateOnlyMDRace},
		{Name: "create-only-requests", Guards: []string{SingleAcker, NoAckedWriteLoss},
			Description: "create_only mode: each sync sends one write, its md create, and no CAS; the fence checks are reads", run: checkCreateOnlyRequests},
		{Name: "create-only-gc-beside-zombie", Guards: []string{GCSafety, NoAckedWriteLoss},
			Description: "create_only mode: gc-beside-zombie with no CAS on any sync: the successor checkpoints and runs GC while the zombie's md create is on the wire; the poison survives, the zombie's GC deletes nothing", run: checkCreateOnlyGCBesideZombie},
		{Name: "create-only-handoff-race", Guards: []string{SingleAcker, NoSpuriousFencing, NoAckedWriteLoss},
			Description: "create_only mode: the adopt's one CAS races the source's revert (adopt first: the revert stands down; revert first, the adopt's CAS held on the wire: the adopt is fenced); never both acknowledge", run: checkCreateOnlyHandoffRace},
	}
}

// staleWriterHint is what a lost acknowledged op says about a store.
const staleWriterHint = "; a store that lets a late create-if-absent replace an object (the poison) or a stale CAS pass can lose acknowledged writes"

func checkClaimRace(t T, c *blobstore.Container) {
	// The orders the held creates are released in: all at once, then one
	// by one lowest term first and highest first, each round on a shard
	// of its own.
	rounds := []struct {
		order []int // indexes into the claimants
		gap   time.Duration
	}{
		{[]int{0, 1, 2, 3}, 0},
		{[]int{0, 1, 2, 3}, 5 * time.Millisecond},
		{[]int{3, 2, 1, 0}, 5 * time.Millisecond},
	}
	for i, r := range rounds {
		sub, err := blobstore.Sub(c, fmt.Sprintf("round-%d", i+1))
		if err != nil {
			unstaged(t, "round prefix: %v", err)
		}
		how := "all at once"
		if r.gap > 0 {
			how = fmt.Sprintf("in the order %v, %v apart", r.order, r.gap)
		}
		claimRaceRound(&prefixT{T: t, prefix: fmt.Sprintf("round %d (creates released %s): ", i+1, how)}, sub, r.order, r.gap)
	}
}

// prefixT says which round a message is about.
type prefixT struct {
	T
	prefix string
}

func (p *prefixT) Errorf(format string, args ...any) { p.T.Errorf(p.prefix+format, args...) }
func (p *prefixT) Fatalf(format string, args ...any) { p.T.Fatalf(p.prefix+format, args...) }
func (p *prefixT) Logf(format string, args ...any)   { p.T.Logf(p.prefix+format, args...) }

func claimRaceRound(t T, c *blobstore.Container, order []int, gap time.Duration) {
	e := newFencingEnv(t, c)
	w1 := e.actor("term 1")
	sh1 := e.mustOpen(w1, 1, "a1", nil)
	e.mustAppend(sh1.Writer, "term 1", "w1-0")

	// Term 1 keeps appending through the race, as a live primary does.
	stop := make(chan struct{})
	incumbent := make(chan error, 1)
	go func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				incumbent <- nil
				return
			default:
			}
			if _, err := e.appendOp(sh1.Writer, "term 1", fmt.Sprintf("w1-%d", i)); err != nil {
				incumbent <- err
				return
			}
		}
	}()

	type claimant struct {
		term  int64
		alloc string
		a     *actor
		h     *hold
		res   <-chan opened
	}
	cs := []*claimant{{term: 2, alloc: "a2"}, {term: 3, alloc: "a3"}, {term: 3, alloc: "a3-rival"}, {term: 4, alloc: "a4"}}
	for _, cl := range cs {
		cl.a = e.actor(fmt.Sprintf("term %d (%s)", cl.term, cl.alloc))
		// Each claim's create is held until all four are on the wire,
		// then all go at once.
		cl.h = cl.a.hold(fmt.Sprintf("the fence key create of %s's claim of term %d", cl.alloc, cl.term), request(blobstore.OpCreateIfAbsent, layout.FenceKey(cl.term)))
		cl.res = e.openAsync(cl.a, cl.term, cl.alloc, nil)
	}
	for _, cl := range cs {
		e.await(cl.h)
	}
	for i, k := range order {
		if i > 0 && gap > 0 {
			time.Sleep(gap)
		}
		cs[k].h.release()
	}
	shards := map[*claimant]*recovery.Shard{}
	for _, cl := range cs {
		r := receive(e, cl.res, fmt.Sprintf("the claim of term %d by %s", cl.term, cl.alloc))
		switch {
		case r.err == nil:
			shards[cl] = r.sh
		case cl.term == 4:
			violated(t, HigherTermPrevails, "term 4, the highest claim, did not open: %v", r.err)
			close(stop)
			return
		case !errors.Is(r.err, fence.ErrFenced):
			// Store trouble the retries did not ride out: not a
			// verdict on the protocol, but worth seeing.
			t.Logf("the claim of term %d by %s ended with %v (neither opened nor fenced)", cl.term, cl.alloc, r.err)
		}
	}
	close(stop)
	if err := receive(e, incumbent, "term 1's appends"); err != nil && !errors.Is(err, fence.ErrFenced) {
		t.Logf("term 1's appends ended with %v", err)
	}
	if shards[cs[1]] != nil && shards[cs[2]] != nil {
		violated(t, SingleAcker, "both %s and %s opened term 3: a create-if-absent of the fence key succeeded twice (If-None-Match: * not enforced under a race)", cs[1].alloc, cs[2].alloc)
	}
	sh4 := shards[cs[3]]
	// Term 4 holds the shard: every lower writer, whether its claim
	// completed before term 4's sweep or not, is fenced from now on.
	e.expectFenced(sh1.Writer, "term 1", "w1-after-term-4", SingleAcker, "term 4 had opened: its sweep deleted term 1's fence key and its seal poisoned term 1's next generation")
	for _, cl := range cs[:3] {
		if sh := shards[cl]; sh != nil {
			e.expectFenced(sh.Writer, fmt.Sprintf("term %d (%s)", cl.term, cl.alloc), fmt.Sprintf("t%d-%s-after-term-4", cl.term, cl.alloc), SingleAcker, "term 4 had opened; a lower term must not acknowledge after a higher one holds the shard")
		}
	}
	e.mustAppend(sh4.Writer, "term 4", "w4-1")
	e.mustAppend(sh4.Writer, "term 4", "w4-2")
	e.verifyLineage(staleWriterHint)
}

// zombie is term 1 caught mid-sync: two generations acknowledged, the
// third on the wire with its md create held and its CAS landed. From here
// on nothing but the create-only md stops it from acknowledging.
type zombie struct {
	a       *actor
	sh      *recovery.Shard
	gen     int64  // the generation on the wire
	gap     string // its md key
	md      *hold  // its md create
	pending <-chan appended
}

func (e *fencingEnv) stageZombie() *zombie {
	e.t.Helper()
	z := &zombie{a: e.actor("term 1")}
	z.sh = e.mustOpen(z.a, 1, "a1", nil)
	e.mustAppend(z.sh.Writer, "term 1", "z-1")
	e.mustAppend(z.sh.Writer, "term 1", "z-2")
	z.gen = z.sh.Writer.NextGen()
	z.gap = layout.MDKey(1, z.gen)
	z.md = z.a.hold(fmt.Sprintf("term 1's md create for gen %d", z.gen), request(blobstore.OpCreateIfAbsent, z.gap))
	z.pending = e.appendAsync(z.sh.Writer, "term 1", "z-3")
	e.await(z.md)
	if e.mode != translog.CreateOnly {
		// The concurrent order sent the CAS beside the md (create-only
		// mode sends none).
		e.waitFenceGen(1, z.gen)
	}
	return z
}

func checkZombieMDAfterSeal(t T, c *blobstore.Container) {
	e := newFencingEnv(t, c)
	z := e.stageZombie()
	sh1, gen, gap, h, pending := z.sh, z.gen, z.gap, z.md, z.pending

	s := e.actor("term 2")
	sh2 := e.mustOpen(s, 2, "a2", nil)
	if rp := sh2.Restore(); rp.Term != 1 || rp.Gen != gen-1 || sh2.Seal.Marker.Poisoned != gap {
		t.Errorf("term 2 sealed at term %d gen %d with its poison at %q; want term 1 gen %d cut by a poison at %s (the md of gen %d was never sent to the store)", rp.Term, rp.Gen, sh2.Seal.Marker.Poisoned, gen-1, gap, gen)
	}
	h.release()
	e.expectRefused(receive(e, pending, "the zombie's append"), "term 1", NoAckedWriteLoss, 2,
		fmt.Sprintf("its md create for gen %d landed after term 2's seal had put a poison there, and term 2's restore point ends at gen %d: the store let a create-if-absent replace an existing object (If-None-Match: * not enforced)", gen, gen-1))
	e.expectPoison(gap, 2, NoAckedWriteLoss, "after the zombie's md create landed,")
	e.expectFenced(sh1.Writer, "term 1", "z-4", FencedTerminal, "it was fenced once already")
	e.mustAppend(sh2.Writer, "term 2", "s-1")
	e.mustAppend(sh2.Writer, "term 2", "s-2")
	e.verifyLineage(staleWriterHint)
}

func checkZombieMDBeforePoison(t T, c *blobstore.Container) {
	e := newFencingEnv(t, c)
	z := e.stageZombie()
	sh1, gen, gap, hz, pz := z.sh, z.gen, z.gap, z.md, z.pending

	s := e.actor("term 2")
	hs := s.hold(fmt.Sprintf("term 2's poison create at gen %d", gen), request(blobstore.OpCreateIfAbsent, gap))
	col := &collector{}
	ps := e.openAsync(s, 2, "a2", col)
	e.await(hs) // term 2 swept term 1's key and is about to poison gen
	hz.release()
	rz := receive(e, pz, "the zombie's append")
	hs.release()
	r2 := receive(e, ps, "term 2's open")
	if r2.err != nil {
		violated(t, HigherTermPrevails, "term 2 could not open after its poison create found term 1's md: %v", r2.err)
		return
	}
	sh2 := r2.sh
	switch {
	case rz.err == nil:
		// The zombie acknowledged: its CAS landed before term 2's sweep
		// and its md before the poison. Term 2 must hold it.
		if rp := sh2.Restore(); rp.Gen < gen || !col.has("z-3") {
			violated(t, NoAckedWriteLoss, "term 1 acknowledged %q at gen %d (its CAS landed before term 2's sweep, its md before term 2's poison), but term 2 restored up to term %d gen %d without it: term 2's poison create did not find the md already stored there (a create that overwrites, If-None-Match: * not enforced, replaces it with the poison; a LIST that lags hides it)", "z-3", gen, rp.Term, rp.Gen)
		}
		if want := layout.MDKey(1, gen+1); sh2.Seal.Marker.Poisoned != want {
			t.Errorf("term 2 poisoned %q after including gen %d; want %s", sh2.Seal.Marker.Poisoned, gen, want)
		}
	case errors.Is(rz.err, fence.ErrFenced):
		t.Logf("the zombie was fenced before it acknowledged gen %d (%v)", gen, rz.err)
	default:
		t.Errorf("the zombie's append of z-3 ended with %v, neither acknowledged nor fenced", rz.err)
	}
	e.expectFenced(sh1.Writer, "term 1", "z-4", SingleAcker, "term 2 had opened")
	e.mustAppend(sh2.Writer, "term 2", "s-1")
	e.verifyLineage(staleWriterHint)
}

func checkLostResponses(t T, c *blobstore.Container) {
	e := newFencingEnv(t, c)
	p := e.actor("term 1")
	type fault struct {
		a    *actor
		id   faulty.RuleID
		what string
	}
	var faults []fault
	inject := func(a *actor, what string, r faulty.Rule) {
		r.Times = max(r.Times, 1)
		faults = append(faults, fault{a, a.rule(r), what})
	}
	create, cas := faulty.Ops(blobstore.OpCreateIfAbsent), faulty.Ops(blobstore.OpCompareAndSwap)
	inject(p, "a lost response to the claim's fence create", faulty.Rule{Ops: create, Prefix: layout.FenceDir, Fault: faulty.LostResponse})
	inject(p, "a lost response to the fencing settings create", faulty.Rule{Ops: create, Prefix: layout.FencingKey, Fault: faulty.LostResponse})
	inject(p, "a lost response to the seal marker create", faulty.Rule{Ops: create, Prefix: layout.SealDir, Fault: faulty.LostResponse})
	sh1, err := e.open(p, 1, "a1", nil)
	switch {
	case errors.Is(err, fence.ErrFenced):
		violated(t, NoSpuriousFencing, "term 1, alone on the shard, was fenced by lost responses to its own creates: %v", err)
		return
	case err != nil:
		violated(t, NoSpuriousFencing, "term 1, alone on the shard, could not open through lost responses to its own creates: %v", err)
		return
	}
	big := strings.Repeat("x", 300) // above the inline limit: a data object first
	steps := []struct {
		what  string
		op    string
		rules []faulty.Rule
	}{
		{"a lost md create response", "p-md", []faulty.Rule{{Ops: create, Prefix: layout.MDPrefix, Fault: faulty.LostResponse}}},
		{"a lost fence CAS response", "p-cas", []faulty.Rule{{Ops: cas, Prefix: layout.FenceDir, Fault: faulty.LostResponse}}},
		{"two 409 ConditionalRequestConflict answers to the fence CAS", "p-409", []faulty.Rule{{Ops: cas, Prefix: layout.FenceDir, Fault: faulty.Conflict, Times: 2}}},
		{"a 409 ConditionalRequestConflict answer to the md create", "p-409md", []faulty.Rule{{Ops: create, Prefix: layout.MDPrefix, Fault: faulty.Conflict}}},
		{"a refused (unavailable) fence CAS and md create", "p-503", []faulty.Rule{{Ops: cas, Prefix: layout.FenceDir, Fault: faulty.Unavailable}, {Ops: create, Prefix: layout.MDPrefix, Fault: faulty.Unavailable}}},
		{"a fence CAS lost before it reached the store", "p-lostreq", []faulty.Rule{{Ops: cas, Prefix: layout.FenceDir, Fault: faulty.LostRequest}}},
		{"lost responses to both the md create and the CAS of one sync", "p-both", []faulty.Rule{{Ops: create, Prefix: layout.MDPrefix, Fault: faulty.LostResponse}, {Ops: cas, Prefix: layout.FenceDir, Fault: faulty.LostResponse}}},
		{"a lost response to a data object PUT", "p-data-" + big, []faulty.Rule{{Ops: faulty.Ops(blobstore.OpPut), Prefix: layout.DataDir, Fault: faulty.LostResponse}}},
	}
	for _, st := range steps {
		for _, r := range st.rules {
			inject(p, st.what, r)
		}
		if _, err := e.appendOp(sh1.Writer, "term 1", st.op); err != nil {
			violated(t, NoSpuriousFencing, "%s failed term 1's append (no successor, no handoff): %v", st.what, err)
			return
		}
	}
	want := sh1.Writer.NextGen() - 1

	s := e.actor("term 2")
	inject(s, "a 409 answer to term 2's fence create", faulty.Rule{Ops: create, Prefix: layout.FenceDir, Fault: faulty.Conflict})
	inject(s, "a lost response to term 2's fence create", faulty.Rule{Ops: create, Prefix: layout.FenceDir, Fault: faulty.LostResponse})
	inject(s, "a sweep delete the store silently dropped", faulty.Rule{Ops: faulty.Ops(blobstore.OpDelete), Prefix: layout.FenceDir, Fault: faulty.DropDelete})
	inject(s, "a lost response to a sweep delete", faulty.Rule{Ops: faulty.Ops(blobstore.OpDelete), Prefix: layout.FenceDir, Fault: faulty.LostResponse})
	inject(s, "a lost response to term 2's poison create", faulty.Rule{Ops: create, Prefix: layout.MDPrefix, Fault: faulty.LostResponse})
	inject(s, "a lost response to term 2's marker create", faulty.Rule{Ops: create, Prefix: layout.SealDir, Fault: faulty.LostResponse})
	sh2, err := e.open(s, 2, "a2", nil)
	if err != nil {
		violated(t, HigherTermPrevails, "term 2 could not open through lost responses, a dropped delete and its predecessor's history: %v", err)
		return
	}
	if rp := sh2.Restore(); rp.Term != 1 || rp.Gen != want {
		violated(t, NoAckedWriteLoss, "term 2 restored up to term %d gen %d; term 1 acknowledged every generation up to %d", rp.Term, rp.Gen, want)
	}
	inject(s, "a lost response to term 2's fence CAS", faulty.Rule{Ops: cas, Prefix: layout.FenceDir, Fault: faulty.LostResponse})
	e.mustAppend(sh2.Writer, "term 2", "s-1")
	e.expectFenced(sh1.Writer, "term 1", "p-late", SingleAcker, "term 2 had opened")
	for _, f := range faults {
		e.expectFired(f.a, f.id, f.what)
	}
	e.verifyLineage(staleWriterHint)
}

func checkFenceABA(t T, c *blobstore.Container) {
	e := newFencingEnv(t, c)
	tokenOfSameBody(e)

	// A claim whose first create is answered "unknown" at once and lands
	// only after a successor swept the key: the claimant settles by
	// reading, finds nothing, and creates again. The late create then
	// brings the key back with the first attempt's body.
	z := e.actor("term 1")
	late := z.rule(faulty.Rule{Ops: faulty.Ops(blobstore.OpCreateIfAbsent), Prefix: layout.FencePrefix, Fault: faulty.LandLater, Times: 1})
	sh1 := e.mustOpen(z, 1, "a1", nil)
	e.expectFired(z, late, "a claim create that timed out and lands late")
	held := sh1.Chain.State()
	s := e.actor("term 2")
	sh2 := e.mustOpen(s, 2, "a2", nil)
	for _, l := range z.f.Land(e.ctx) {
		if l.Err != nil {
			t.Logf("the late claim create of term 1 landed with %v", l.Err)
		}
	}
	if obj, err := e.store.Get(e.ctx, layout.FenceKey(1)); err == nil && obj.Token == held.Token {
		violated(t, SingleAcker, "the late claim create of term 1 brought its fence key back with the token term 1 holds (%s), after term 2 deleted it: any stale CAS of term 1 passes again (ABA). The bodies of the two creates differ only in their nonce; the store gives equal tokens to different bodies, or reuses a token after delete and re-create", held.Token)
	}
	// The real fence code of the zombie tries to commit its next
	// generation on the resurrected key.
	if _, err := sh1.Chain.Advance(e.ctx, sh1.Writer.NextGen()); err == nil {
		violated(t, SingleAcker, "term 1's fence CAS passed on a key its own late claim create brought back after term 2's sweep: a zombie holds a valid chain beside term 2")
	} else if !errors.Is(err, fence.ErrFenced) {
		t.Errorf("term 1's fence CAS on the resurrected key ended with %v, want fenced", err)
	}
	e.expectFenced(sh1.Writer, "term 1", "z-1", FencedTerminal, "its chain was fenced")

	// A handoff and its revert: the key ends at a body it never held,
	// so the token from before the handoff never matches again.
	e.mustAppend(sh2.Writer, "term 2", "s-1")
	before := sh2.Chain.State()
	src, hc := e.handoff(s, sh2)
	d := e.actor("the relocation target")
	_, wd, err := relocation.Adopt(e.ctx, d.store, "dst", hc, relocation.AdoptOptions{Backoff: fencingBackoff(), Clock: e.clock, Writer: e.writerOptions()})
	if err != nil {
		unstaged(t, "adopt at dst: %v", err)
	}
	e.track(wd)
	out, err := src.Abort(e.ctx)
	e.track(src.Writer())
	if err != nil || out != relocation.Resumed {
		unstaged(t, "revert before the target wrote: %v %v, want resumed", out, err)
	}
	stale := before.Record
	stale.Node = "stale-token-probe"
	body, err := stale.Encode()
	if err != nil {
		unstaged(t, "encode a probe record: %v", err)
	}
	if _, err := e.store.CompareAndSwap(e.ctx, layout.FenceKey(2), before.Token, body); err == nil {
		violated(t, SingleAcker, "a CAS with the token term 2's key had before the handoff (%s) passed after the revert: the revert brought back a body the key held before, or the store repeats tokens; a writer holding that token would commit beside the owner", before.Token)
		return
	} else if !errors.Is(err, blobstore.ErrPreconditionFailed) {
		unstaged(t, "CAS with the pre-handoff token: %v", err)
	}
	// The source writes on; the target, which holds the transfer's token,
	// must not (its first sync would otherwise race the source's, the
	// relocation liveness gap of PROTOCOL.md section 6).
	e.mustAppend(src.Writer(), "term 2", "s-2")
	e.expectFenced(wd, "the relocation target", "d-1", SingleAcker, "the source had reverted the handoff")
	e.verifyLineage(staleWriterHint)
}

// tokenOfSameBody reports (as a log line of the check) whether the store's
// tokens hash the body: then a body written again looks unchanged, and only
// the protocol's rule of never writing a body twice keeps a stale CAS out.
func tokenOfSameBody(e *fencingEnv) {
	ctx := e.ctx
	key := "aba-probe"
	a, b := []byte("aba probe body A"), []byte("aba probe body B")
	t1, err := e.store.CreateIfAbsent(ctx, key, a)
	if err != nil {
		unstaged(e.t, "create %s: %v", key, err)
	}
	t2, err := e.store.CompareAndSwap(ctx, key, t1, b)
	if err != nil {
		unstaged(e.t, "CAS %s: %v", key, err)
	}
	t3, err := e.store.CompareAndSwap(ctx, key, t2, a)
	if err != nil {
		unstaged(e.t, "CAS %s back: %v", key, err)
	}
	_ = e.store.Delete(ctx, key)
	if t3 == t1 {
		e.t.Logf("tokens hash the body (token %s again for the same bytes): a same-body rewrite looks unchanged to a stale CAS; the protocol never writes a fence body twice", t1)
	} else {
		e.t.Logf("tokens are versions (%s, then %s for the same bytes): a same-body rewrite gets a new token", t1, t3)
	}
}

func checkHandoffRevert(t T, c *blobstore.Container) {
	e := newFencingEnv(t, c)
	sa := e.actor("the source")
	sh := e.mustOpen(sa, 1, "src", nil)
	e.mustAppend(sh.Writer, "the source", "a")
	src := relocation.NewSource(sa.store, sh.Chain, sh.Writer, e.writerOptions())
	cas := faulty.Ops(blobstore.OpCompareAndSwap)
	adopt := func(a *actor, alloc string, hc relocation.HandoffContext) *translog.Writer {
		t.Helper()
		_, w, err := relocation.Adopt(e.ctx, a.store, alloc, hc, relocation.AdoptOptions{Backoff: fencingBackoff(), Clock: e.clock, Writer: e.writerOptions()})
		if err != nil {
			violated(t, NoSpuriousFencing, "%s could not adopt the handoff it was given: %v", alloc, err)
			t.Fatalf("stopping: the rest of the check builds on this adopt")
		}
		e.track(w)
		return w
	}

	lost := sa.rule(faulty.Rule{Ops: cas, Prefix: layout.FenceDir, Fault: faulty.LostResponse, Times: 1})
	hc, err := src.Handoff(e.ctx, "dst", "")
	if err != nil {
		violated(t, NoSpuriousFencing, "a lost response to the transfer CAS failed the handoff: %v", err)
		return
	}
	e.expectFired(sa, lost, "a lost transfer response")
	d := e.actor("the first target")
	wd := adopt(d, "dst", hc)
	lost = sa.rule(faulty.Rule{Ops: cas, Prefix: layout.FenceDir, Fault: faulty.LostResponse, Times: 1})
	out, err := src.Abort(e.ctx)
	e.track(src.Writer())
	if err != nil || out != relocation.Resumed {
		violated(t, NoSpuriousFencing, "the revert before the target wrote (with a lost response) ended %v, %v; want the source resumed", out, err)
		return
	}
	e.expectFired(sa, lost, "a lost revert response")
	e.mustAppend(src.Writer(), "the source", "b")
	e.expectFenced(wd, "the first target", "t1", SingleAcker, "the source reverted the handoff: the key names the source again")

	hc2, err := src.Handoff(e.ctx, "dst2", "")
	if err != nil {
		unstaged(t, "second handoff: %v", err)
	}
	d2 := e.actor("the second target")
	wd2 := adopt(d2, "dst2", hc2)
	e.mustAppend(wd2, "the second target", "c")
	e.revertStandsDown(src, "after the target wrote", "the store accepted a CAS expecting the transfer's token after the target's CAS had replaced it (If-Match not enforced)")
	e.expectFenced(src.Writer(), "the source", "b-late", SingleAcker, "the target had written after the second handoff")
	e.mustAppend(wd2, "the second target", "d")
	e.verifyLineage(staleWriterHint)
}

func checkHandoffRacingTarget(t T, c *blobstore.Container) {
	e := newFencingEnv(t, c)
	sa := e.actor("the source")
	sh := e.mustOpen(sa, 1, "src", nil)
	e.mustAppend(sh.Writer, "the source", "a")
	src, hc := e.handoff(sa, sh)
	d := e.actor("the target")
	_, wd, err := relocation.Adopt(e.ctx, d.store, "dst", hc, relocation.AdoptOptions{Backoff: fencingBackoff(), Clock: e.clock, Writer: e.writerOptions()})
	if err != nil {
		unstaged(t, "adopt: %v", err)
	}
	e.track(wd)
	gen := hc.Gen + 1
	h := d.hold("the target's first fence CAS", request(blobstore.OpCompareAndSwap, layout.FenceKey(1)))
	pd := e.appendAsync(wd, "the target", "t")
	e.await(h)
	// The target's md for gen goes out beside its CAS; wait for it to land.
	for {
		if _, err := e.store.Stat(e.ctx, layout.MDKey(1, gen)); err == nil {
			break
		}
		select {
		case <-e.ctx.Done():
			unstaged(t, "the target's md of gen %d never landed (%v)", gen, context.Cause(e.ctx))
		case <-time.After(2 * time.Millisecond):
		}
	}
	e.revertResumes(src, h, "the target's CAS")
	rd := receive(e, pd, "the target's append")
	rs, serr := e.appendOp(src.Writer(), "the source", "b")
	if rd.err == nil && serr == nil {
		violated(t, SingleAcker, "after the revert both the target (%q at gen %d) and the source (%q at gen %d) acknowledged in term 1", "t", rd.ack.Gen, "b", rs.Gen)
	}
	if rd.err == nil {
		violated(t, SingleAcker, "the target acknowledged %q at gen %d though the source's revert had moved the key off the token it held: the store accepted a stale If-Match", "t", rd.ack.Gen)
	}
	t.Logf("target: %v; source after the revert: %v", rd.err, serr)
	e.verifyLineage(staleWriterHint)
}

func checkGCBesideZombie(t T, c *blobstore.Container) {
	gcBesideZombie(newFencingEnv(t, c))
}

// checkCreateOnlyGCBesideZombie is gc-beside-zombie with every writer in
// create_only mode: the checkpoint and GC of a term whose syncs send no
// CAS, beside a zombie whose md create is on the wire.
func checkCreateOnlyGCBesideZombie(t T, c *blobstore.Container) {
	gcBesideZombie(newCreateOnlyEnv(t, c))
}

func gcBesideZombie(e *fencingEnv) {
	t := e.t
	z := e.stageZombie()
	if e.mode == translog.CreateOnly {
		e.expectCreateOnly()
	}
	sh1, gen, gap, h, pz := z.sh, z.gen, z.gap, z.md, z.pending

	s := e.actor("term 2")
	col := &collector{}
	sh2 := e.mustOpen(s, 2, "a2", col)
	var last translog.Ack
	for i := 1; i <= 3; i++ {
		last = e.mustAppend(sh2.Writer, "term 2", fmt.Sprintf("s-%d", i))
	}
	state := append(col.all(), e.ackedBy("term 2")...)
	if _, err := seal.PublishCheckpoint(e.ctx, s.store, sh2.Chain, last.Gen, e.checkpointFiles(state), seal.PublishOptions{Options: e.sealOptions(), NextSeqNo: sh2.Writer.NextSeqNo()}); err != nil {
		unstaged(t, "term 2's checkpoint at gen %d: %v", last.Gen, err)
	}
	res, err := seal.GC(e.ctx, s.store, sh2.Chain, seal.GCOptions{Options: e.sealOptions(), Freshness: time.Minute})
	if err != nil {
		unstaged(t, "term 2's GC: %v", err)
	}
	if len(res.Deleted) == 0 {
		unstaged(t, "term 2's GC deleted nothing (planned %d): it was not exercised", len(res.Planned))
	}
	if slices.Contains(res.Deleted, gap) {
		violated(t, GCSafety, "term 2's GC deleted the poison %s while term 1's md create for it was on the wire", gap)
	}
	e.expectPoison(gap, 2, GCSafety, "after term 2's GC")
	t.Logf("term 2's GC deleted %d objects", len(res.Deleted))

	// The zombie's own GC: superseded, it must delete nothing.
	zres, zerr := seal.GC(e.ctx, z.a.store, sh1.Chain, seal.GCOptions{Options: e.sealOptions(), Freshness: time.Minute})
	if zerr == nil {
		violated(t, GCSafety, "GC on behalf of superseded term 1 ran (deleted %d objects): only the owner may collect", len(zres.Deleted))
	} else if zres != nil && len(zres.Deleted) > 0 {
		violated(t, GCSafety, "GC on behalf of superseded term 1 deleted %v before failing with %v", zres.Deleted, zerr)
	}
	h.release()
	e.expectRefused(receive(e, pz, "the zombie's append"), "term 1", NoAckedWriteLoss, 0,
		fmt.Sprintf("its md create for gen %d landed after term 2 poisoned it and collected garbage: the poison did not stop it", gen))
	e.expectPoison(gap, 2, GCSafety, "after the zombie's md create landed,")
	e.mustAppend(sh2.Writer, "term 2", "s-4")
	sh := e.verifyLineage(staleWriterHint)
	if sh != nil && sh.Checkpoint == nil {
		t.Errorf("the final reader used no checkpoint; term 2's checkpoint at gen %d is on its lineage", last.Gen)
	}
}

func checkCheckpointGate(t T, c *blobstore.Container) {
	e := newFencingEnv(t, c)
	p := e.actor("term 1")
	sh1 := e.mustOpen(p, 1, "a1", nil)
	e.mustAppend(sh1.Writer, "term 1", "a")
	b := e.mustAppend(sh1.Writer, "term 1", "b")
	publish := func(gen int64, entries []entry, proof seal.Proof) error {
		next := int64(0)
		for _, x := range entries {
			next = max(next, x.seq+1)
		}
		_, err := seal.PublishCheckpoint(e.ctx, p.store, sh1.Chain, gen, e.checkpointFiles(entries), seal.PublishOptions{Options: e.sealOptions(), LastCAS: proof, NextSeqNo: next})
		return err
	}
	// No CAS vouches for term 1 (no proof given): the gate lists fence/.
	if err := publish(b.Gen, e.ackedBy("term 1"), seal.Proof{}); err != nil {
		if errors.Is(err, seal.ErrSuperseded) {
			violated(t, NoSpuriousFencing, "term 1's checkpoint was refused as superseded with no higher term on the shard: %v", err)
			return
		}
		unstaged(t, "term 1's checkpoint at gen %d: %v", b.Gen, err)
	}

	s := e.actor("term 2")
	sh2 := e.mustOpen(s, 2, "a2", nil)
	e.mustAppend(sh2.Writer, "term 2", "c")

	first := e.ackedBy("term 1")[:1]
	err := publish(first[0].gen, first, seal.Proof{})
	switch {
	case err == nil:
		violated(t, HigherTermPrevails, "superseded term 1 published a checkpoint after term 2 opened: its LIST of fence/ did not show term 2's key (the store's LIST is not strongly consistent with its writes)")
	case !errors.Is(err, seal.ErrSuperseded):
		t.Errorf("superseded term 1's checkpoint publish failed with %v, want ErrSuperseded", err)
	}
	if _, err := e.store.Stat(e.ctx, layout.ManifestKey(1, first[0].gen)); err == nil {
		violated(t, HigherTermPrevails, "a manifest of superseded term 1 at gen %d is stored", first[0].gen)
	}
	// A checkpoint off the lineage (staged: its proof is forged fresh, so
	// the gate lets it through) holds an op nobody acknowledged.
	orphan := b.Gen + 1
	if err := publish(orphan, []entry{{op: "never-acknowledged", term: 1, gen: orphan, seq: b.FirstSeqNo + 1}}, seal.Proof{At: e.clock.Now(), Valid: true}); err != nil {
		unstaged(t, "the off-lineage checkpoint at term 1 gen %d: %v", orphan, err)
	}
	sh := e.verifyLineage(staleWriterHint)
	if sh == nil {
		return
	}
	switch cp := sh.Checkpoint; {
	case cp == nil:
		t.Errorf("the final reader used no checkpoint; term 1's at gen %d is on its lineage", b.Gen)
	case cp.Term == 1 && cp.Gen == orphan:
		violated(t, NoAckedWriteLoss, "the final reader restored from checkpoint term 1 gen %d, which is off the lineage (term 2 restored from gen %d)", orphan, b.Gen)
	case cp.Term != 1 || cp.Gen != b.Gen:
		t.Errorf("the final reader used checkpoint term %d gen %d, want term 1 gen %d", cp.Term, cp.Gen, b.Gen)
	}
}

// handoff hands the shard a's sh holds off to the allocation "dst": the
// source and the handoff a target adopts.
func (e *fencingEnv) handoff(a *actor, sh *recovery.Shard) (*relocation.Source, relocation.HandoffContext) {
	e.t.Helper()
	src := relocation.NewSource(a.store, sh.Chain, sh.Writer, e.writerOptions())
	hc, err := src.Handoff(e.ctx, "dst", "")
	if err != nil {
		unstaged(e.t, "handoff to dst: %v", err)
	}
	return src, hc
}

// revertStandsDown aborts a handoff's source after the target took the
// shard over (when says how): the revert must stand down, since a source
// that resumes beside its target means the store accepted a CAS expecting
// the transfer's token after the target's CAS had replaced it; because is
// the rest of that violation's message.
func (e *fencingEnv) revertStandsDown(src *relocation.Source, when, because string) {
	e.t.Helper()
	out, err := src.Abort(e.ctx)
	e.track(src.Writer())
	switch {
	case err != nil:
		e.t.Errorf("the revert %s failed: %v; want a stand-down", when, err)
	case out != relocation.StoodDown:
		violated(e.t, SingleAcker, "the revert %s ended %v, not stood down: %s", when, out, because)
	}
}

// revertResumes aborts a handoff's source while h holds the target's CAS
// (what) on the wire, so the source must resume, and then lets the CAS go.
func (e *fencingEnv) revertResumes(src *relocation.Source, h *hold, what string) {
	e.t.Helper()
	out, err := src.Abort(e.ctx)
	e.track(src.Writer())
	if err != nil || out != relocation.Resumed {
		unstaged(e.t, "the revert while %s is on the wire: %v %v, want resumed", what, out, err)
	}
	h.release()
}
