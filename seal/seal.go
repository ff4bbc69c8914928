package seal

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/translog"
)

// Result is what a seal established for its term.
type Result struct {
	// Marker is the term's marker as stored.
	Marker Marker
	// Lineage is the inherited history, its newest range ending at the
	// restore gen.
	Lineage Lineage
	// Reused: the marker was written by an earlier attempt of the same
	// allocation (an Open retried after a failure before opening).
	Reused bool
	// Found is how the walk met the poison: "created" (this seal cut the
	// lineage), "found" (another successor had cut it there), "" for a
	// new shard or a reused marker.
	Found string
}

// Restore is the restore point the term opens at.
func (r *Result) Restore() RestorePoint { return r.Marker.Restore }

// Seal resolves the lineage the claimed chain's term inherits, poisons the
// first missing generation of the lineage term, and writes the term's seal
// marker (protocol section 4 step 6, section 5). The chain must have
// completed its claim: the lineage is read only after every lower fence key
// is gone, so no lower term can acknowledge anything past what is read. A
// marker of a higher term means the grant is stale: the chain is fenced.
// Seal is idempotent for the same term and allocation as long as the term
// was not opened for writes.
func Seal(ctx context.Context, store blobstore.Container, chain *fence.Chain, opts Options) (*Result, error) {
	s := io{store: store, shard: chain.Shard(), opts: opts.withDefaults()}
	term := chain.Term()
	fail := func(key string, err error) (*Result, error) {
		return nil, wrapErr("Seal", s.shard, key, term, err)
	}
	if err := chain.Err(); err != nil {
		return nil, err
	}
	items, err := s.list(ctx, MarkerPrefix)
	if err != nil {
		return fail(Dir, err)
	}
	var terms []int64
	for _, it := range items {
		if t, ok := ParseMarkerKey(it.Key); ok {
			if t > term {
				return nil, chain.Fence(t, fmt.Sprintf("stale term: term %d already sealed the shard (marker %q)", t, it.Key))
			}
			terms = append(terms, t)
		}
	}
	markers, err := s.readMarkers(ctx, terms)
	if err != nil {
		return fail(Dir, err)
	}
	if own, ok := markers[term]; ok {
		return s.reopen(ctx, chain, own, markers)
	}
	top := int64(0)
	for t := range markers {
		top = max(top, t)
	}
	want := Marker{Shard: s.shard, Term: term, Allocation: chain.Allocation()}
	found := ""
	var lin Lineage
	if top > 0 {
		prev := markers[top]
		cut, poisoned, how, err := s.cut(ctx, top, prev.Restore.Gen, term)
		if err != nil {
			return fail(translog.MDTermPrefix(top), err)
		}
		found = how
		want.Restore = RestorePoint{Term: top, Gen: cut, MDKey: prev.Restore.MDKey}
		if cut > prev.Restore.Gen {
			want.Restore.MDKey = translog.MDKey(top, cut)
		}
		want.Poisoned, want.Prev = poisoned, MarkerKey(top)
		chainMs, complete := ChainFrom(markers, top)
		if lin, err = LineageOf(s.shard, chainMs, complete, cut); err != nil {
			return fail(MarkerKey(top), err)
		}
	} else {
		lin = Lineage{Complete: true}
	}
	stored, err := s.writeMarker(ctx, chain, want)
	if err != nil {
		return nil, err
	}
	if stored != want {
		// An earlier attempt of this allocation wrote the marker first
		// (it saw other markers then): its restore point holds.
		markers[term] = stored
		return s.reopen(ctx, chain, stored, markers)
	}
	return &Result{Marker: stored, Lineage: lin, Found: found}, nil
}

// readMarkers GETs the markers of terms in parallel. A marker listed but
// gone when read was collected meanwhile and is left out.
func (s io) readMarkers(ctx context.Context, terms []int64) (map[int64]Marker, error) {
	out := make([]*Marker, len(terms))
	err := parallel(ctx, s.opts.Parallelism, len(terms), func(ctx context.Context, i int) error {
		key := MarkerKey(terms[i])
		obj, found, err := s.get(ctx, key)
		if err != nil || !found {
			return err
		}
		m, err := DecodeMarker(s.shard, key, obj.Body)
		if err != nil {
			return err
		}
		out[i] = &m
		return nil
	})
	if err != nil {
		return nil, err
	}
	markers := make(map[int64]Marker, len(terms))
	for _, m := range out {
		if m != nil {
			markers[m.Term] = *m
		}
	}
	return markers, nil
}

// cut finds where lineage term tl ends for successor term: the md after
// from are read in order; the first missing generation is poisoned, a real
// md found there is included and the next one tried, and a poison (ours
// from a lost response, or another successor's) ends the walk.
//
// GC deletes translog at or below a complete checkpoint, so the walk starts
// at the newest checkpoint of tl when it is past from: a checkpoint is
// published only for acknowledged generations, which every successor's
// restore point holds, so nothing at or below it can be a gap.
func (s io) cut(ctx context.Context, tl, from, term int64) (cut int64, poisoned, how string, err error) {
	var gens []int64
	var ckpts []blobstore.Attrs
	err = parallel(ctx, 2, 2, func(ctx context.Context, i int) error {
		var err error
		if i == 0 {
			err = s.retry(ctx, func(ctx context.Context) error {
				var err error
				gens, err = translog.NewReader(s.store, s.shard).Gens(ctx, tl)
				return err
			})
		} else {
			ckpts, err = s.list(ctx, ManifestPrefix+fence.Inv(tl)+"__")
		}
		return err
	})
	if err != nil {
		return 0, "", "", err
	}
	for _, it := range ckpts {
		if t, g, ok := ParseManifestKey(it.Key); ok && t == tl {
			from = max(from, g)
		}
	}
	k := ContiguousAfter(gens, from)
	mds := make([]translog.MD, k-from)
	err = parallel(ctx, s.opts.Parallelism, len(mds), func(ctx context.Context, i int) error {
		md, err := s.readMD(ctx, tl, from+1+int64(i))
		mds[i] = md
		return err
	})
	if err != nil {
		return 0, "", "", err
	}
	for _, md := range mds {
		if md.Kind == translog.KindPoison {
			return md.Gen - 1, translog.MDKey(tl, md.Gen), "found", nil
		}
	}
	m := k
	for {
		key := translog.MDKey(tl, m+1)
		body, err := translog.EncodePoison(s.shard, tl, m+1, term)
		if err != nil {
			return 0, "", "", err
		}
		var created bool
		err = s.retry(ctx, func(ctx context.Context) error {
			_, err := s.store.CreateIfAbsent(ctx, key, body)
			if err == nil {
				created = true
				return nil
			}
			if errors.Is(err, blobstore.ErrAlreadyExists) || blobstore.IsAmbiguous(err) {
				return nil // settled by reading below
			}
			return err
		})
		if err != nil {
			return 0, "", "", err
		}
		if created {
			return m, key, "created", nil
		}
		md, err := s.readMD(ctx, tl, m+1)
		if errors.Is(err, translog.ErrMissingGen) {
			continue // the create did not land: send it again
		}
		if err != nil {
			return 0, "", "", err
		}
		if md.Kind == translog.KindPoison {
			if md.SealedBy == term {
				return m, key, "created", nil
			}
			return m, key, "found", nil
		}
		m++ // the lineage term's md landed first: it is on the lineage
	}
}

// readMD reads and decodes one md, retrying store trouble.
func (s io) readMD(ctx context.Context, term, gen int64) (translog.MD, error) {
	key := translog.MDKey(term, gen)
	obj, found, err := s.get(ctx, key)
	if err != nil {
		return translog.MD{}, err
	}
	if !found {
		return translog.MD{}, fmt.Errorf("%w: no md for generation %d of term %d (key %q)", translog.ErrMissingGen, gen, term, key)
	}
	return translog.DecodeMD(s.shard, key, obj.Body)
}

// writeMarker creates want's marker and returns what the key holds: want,
// or an earlier attempt of the same allocation. Another allocation's
// marker for the term fences the chain.
func (s io) writeMarker(ctx context.Context, chain *fence.Chain, want Marker) (Marker, error) {
	key := MarkerKey(want.Term)
	body, err := want.Encode()
	if err != nil {
		return Marker{}, wrapErr("Seal", s.shard, key, want.Term, err)
	}
	var stored Marker
	var fenced error
	err = s.retry(ctx, func(ctx context.Context) error {
		_, err := s.store.CreateIfAbsent(ctx, key, body)
		if err == nil {
			stored = want
			return nil
		}
		if !errors.Is(err, blobstore.ErrAlreadyExists) && !blobstore.IsAmbiguous(err) {
			return err
		}
		obj, found, err := s.get(ctx, key)
		if err != nil {
			return err
		}
		if !found {
			return blobstore.Unavailable(errors.New("seal marker create did not land; sending it again"))
		}
		m, err := DecodeMarker(s.shard, key, obj.Body)
		if err != nil {
			return err
		}
		if m.Allocation != want.Allocation {
			fenced = chain.Fence(0, fmt.Sprintf("term %d was sealed by allocation %q", want.Term, m.Allocation))
			return fenced
		}
		stored = m
		return nil
	})
	if fenced != nil {
		return Marker{}, fenced
	}
	return stored, wrapErr("Seal", s.shard, key, want.Term, err)
}

// reopen continues a term this allocation sealed before. Safe only if the
// term never opened for writes: a write of its own may still be in flight,
// and a term cannot poison its own lineage.
func (s io) reopen(ctx context.Context, chain *fence.Chain, own Marker, markers map[int64]Marker) (*Result, error) {
	term := chain.Term()
	key := MarkerKey(term)
	if own.Allocation != chain.Allocation() {
		return nil, chain.Fence(0, fmt.Sprintf("term %d was sealed by allocation %q", term, own.Allocation))
	}
	if g := chain.State().Record.Gen; g > own.Restore.Gen {
		return nil, wrapErr("Seal", s.shard, chain.Key(), term, fmt.Errorf("%w: the fence key commits generation %d, past the restore point %d", ErrTermAlreadyOpen, g, own.Restore.Gen))
	}
	var gens []int64
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		gens, err = translog.NewReader(s.store, s.shard).Gens(ctx, term)
		return err
	})
	if err != nil {
		return nil, wrapErr("Seal", s.shard, translog.MDTermPrefix(term), term, err)
	}
	if len(gens) > 0 {
		return nil, wrapErr("Seal", s.shard, translog.MDKey(term, gens[0]), term, fmt.Errorf("%w: generation %d of this term was written", ErrTermAlreadyOpen, gens[0]))
	}
	chainMs, complete := ChainFrom(markers, own.Restore.Term)
	lin, err := LineageOf(s.shard, chainMs, complete, own.Restore.Gen)
	if err != nil {
		return nil, wrapErr("Seal", s.shard, key, term, err)
	}
	return &Result{Marker: own, Lineage: lin, Reused: true}, nil
}
