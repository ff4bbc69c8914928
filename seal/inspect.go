package seal

import (
	"context"
	"fmt"
	"sort"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// FenceKey is one fence key as read.
type FenceKey struct {
	Key    string
	Term   int64
	Record fence.Record // zero when unreadable
	Token  blobstore.Token
	Err    string // why the body could not be read, if so
}

// MDInfo is one md key.
type MDInfo struct {
	Key    string
	Term   int64
	Gen    int64
	Poison bool   // read and found to be a poison
	Sealed int64  // for a poison: the successor term that wrote it
	Err    string // set when the body could not be read or decoded
}

// CheckpointInfo is one checkpoint manifest.
type CheckpointInfo struct {
	Key       string
	Term      int64
	Gen       int64
	OnLineage bool
	Files     int
	Bytes     int64
	Err       string
}

// Object is a key with the reason it is reported.
type Object struct {
	Key    string
	Reason string
}

// Report is what Inspect saw. The lineage is the one the newest marker
// heads, its newest term still open.
type Report struct {
	Shard       string
	Fence       []FenceKey // highest term first
	Markers     []Marker   // every readable marker, newest first
	Lineage     Lineage
	OffChain    []string // markers below the newest one and not on its chain
	Checkpoints []CheckpointInfo
	Poisons     []MDInfo
	Orphans     []Object // never acknowledged: GC deletes them
	MDs         int      // md keys listed
	DataObjects int
	// GC is what a GC by the newest marker's term with default retention
	// would delete.
	GC []Object
	// Problems are bodies that could not be read; nothing they hold is
	// ever deleted.
	Problems []Object
}

// Inspect reads a shard's fence keys, marker chain, lineage, checkpoints,
// poisons and orphans, and what GC would delete. It only reads.
func Inspect(ctx context.Context, store *blobstore.Container, shard string, opts Options) (*Report, error) {
	s := storeIO{store: store, shard: shard, opts: opts.withDefaults()}
	st, err := s.gather(ctx, true)
	if err != nil {
		return nil, wrapErr("Inspect", shard, "", 0, err)
	}
	rep := st.report()
	rep.GC = PlanGC(st.planInput(st.top, GCPolicy{}.withDefaults()))
	return rep, nil
}

// shardState is everything read from a shard's keys.
type shardState struct {
	shard     string
	fence     []FenceKey
	markers   map[int64]Marker
	badMarker []Object
	top       int64
	lin       Lineage
	mds       []MDInfo
	data      []layout.TermGen
	dataKeys  []string
	ckpts     []CheckpointInfo
	manifests map[layout.TermGen]Manifest
	files     map[layout.TermGen][]string // file keys by checkpoint
}

// gather reads the shard: the four LISTs side by side, then the bodies
// that matter, each kind in parallel. md bodies are read only off the
// lineage (to keep poisons and unreadable bodies); the fence keys only
// when readFence.
func (s storeIO) gather(ctx context.Context, readFence bool) (*shardState, error) {
	st := &shardState{shard: s.shard, markers: map[int64]Marker{}, manifests: map[layout.TermGen]Manifest{}, files: map[layout.TermGen][]string{}}
	var fenceItems, markerItems, tlItems, ckItems []blobstore.Attrs
	prefixes := []string{layout.FenceDir, layout.SealDir, layout.TranslogDir, layout.CheckpointDir}
	outs := []*[]blobstore.Attrs{&fenceItems, &markerItems, &tlItems, &ckItems}
	if err := parallel(ctx, s.opts.Parallelism, len(prefixes), func(ctx context.Context, i int) error {
		if i == 0 && !readFence {
			return nil
		}
		items, err := s.list(ctx, prefixes[i])
		*outs[i] = items
		return err
	}); err != nil {
		return nil, err
	}
	st.fence = fenceKeysOf(fenceItems)
	if err := s.readFenceKeys(ctx, st.fence); err != nil {
		return nil, err
	}
	if err := s.readMarkersInto(ctx, st, markerTermsOf(markerItems)); err != nil {
		return nil, err
	}
	if st.top > 0 {
		chain, complete := ChainFrom(st.markers, st.top)
		lin, err := LineageOf(s.shard, chain, complete, OpenTip)
		if err != nil {
			return nil, err
		}
		st.lin = lin
	}
	st.addTranslog(tlItems)
	if err := s.readOffLineage(ctx, st); err != nil {
		return nil, err
	}
	st.addCheckpoints(ckItems)
	if err := s.readManifests(ctx, st.ckpts); err != nil {
		return nil, err
	}
	st.indexCheckpoints()
	return st, nil
}

// fenceKeysOf are the fence keys a LIST of fence/ shows, not yet read.
func fenceKeysOf(items []blobstore.Attrs) []FenceKey {
	var out []FenceKey
	for _, it := range items {
		if t, ok := layout.ParseFenceKey(it.Key); ok {
			out = append(out, FenceKey{Key: it.Key, Term: t})
		}
	}
	return out
}

// readFenceKeys reads each fence key's record, then sorts them highest
// term first. A key gone or unreadable is reported in its Err.
func (s storeIO) readFenceKeys(ctx context.Context, fks []FenceKey) error {
	if err := parallel(ctx, s.opts.Parallelism, len(fks), func(ctx context.Context, i int) error {
		fk := &fks[i]
		var err error
		fk.Err, err = s.inspectRead(ctx, fk.Key, func(obj blobstore.Object) error {
			rec, err := fence.DecodeRecord(s.shard, fk.Key, obj.Body)
			fk.Record, fk.Token = rec, obj.Token
			return err
		})
		return err
	}); err != nil {
		return err
	}
	sort.Slice(fks, func(i, j int) bool { return fks[i].Term > fks[j].Term })
	return nil
}

// markerTermsOf are the terms of the markers a LIST of seal/ shows.
func markerTermsOf(items []blobstore.Attrs) []int64 {
	var terms []int64
	for _, it := range items {
		if t, ok := layout.ParseMarkerKey(it.Key); ok {
			terms = append(terms, t)
		}
	}
	return terms
}

// readMarkersInto reads the markers of terms into st: a marker that does
// not decode is reported, never trusted; one gone is left out.
func (s storeIO) readMarkersInto(ctx context.Context, st *shardState, terms []int64) error {
	ms := make([]*Marker, len(terms))
	bad := make([]string, len(terms))
	if err := parallel(ctx, s.opts.Parallelism, len(terms), func(ctx context.Context, i int) error {
		key := layout.MarkerKey(terms[i])
		obj, found, err := s.get(ctx, key)
		if err != nil || !found {
			return err
		}
		m, err := DecodeMarker(s.shard, key, obj.Body)
		if err != nil {
			bad[i] = err.Error()
			return nil
		}
		ms[i] = &m
		return nil
	}); err != nil {
		return err
	}
	st.addMarkers(terms, ms, bad)
	return nil
}

// addMarkers takes the markers read for terms (nil: gone or unreadable,
// bad the reason when unreadable); the newest is the top.
func (st *shardState) addMarkers(terms []int64, ms []*Marker, bad []string) {
	for i, m := range ms {
		if m != nil {
			st.markers[m.Term] = *m
			st.top = max(st.top, m.Term)
		} else if bad[i] != "" {
			st.badMarker = append(st.badMarker, Object{Key: layout.MarkerKey(terms[i]), Reason: bad[i]})
		}
	}
}

// addTranslog sorts a LIST of translog/ into md keys and data objects.
func (st *shardState) addTranslog(items []blobstore.Attrs) {
	for _, it := range items {
		if p, ok := layout.ParseMDKey(it.Key); ok {
			st.mds = append(st.mds, MDInfo{Key: it.Key, Term: p.Term, Gen: p.Gen})
		} else if p, ok := layout.ParseDataKey(it.Key); ok {
			st.data = append(st.data, p)
			st.dataKeys = append(st.dataKeys, it.Key)
		}
	}
}

// offLineage are the indexes of the md below the top term and off its
// lineage: the ones whose bodies are read.
func (st *shardState) offLineage() []int {
	var out []int
	for i, md := range st.mds {
		if md.Term < st.top && !st.lin.Contains(md.Term, md.Gen) {
			out = append(out, i)
		}
	}
	return out
}

// readOffLineage reads the md off the lineage: a poison is marked, a body
// gone or unreadable is reported in its Err.
func (s storeIO) readOffLineage(ctx context.Context, st *shardState) error {
	offIdx := st.offLineage()
	return parallel(ctx, s.opts.Parallelism, len(offIdx), func(ctx context.Context, j int) error {
		md := &st.mds[offIdx[j]]
		var err error
		md.Err, err = s.inspectRead(ctx, md.Key, func(obj blobstore.Object) error {
			m, err := translog.DecodeMD(s.shard, md.Key, obj.Body)
			if err == nil {
				md.Poison, md.Sealed = m.Kind == translog.KindPoison, m.SealedBy
			}
			return err
		})
		return err
	})
}

// addCheckpoints sorts a LIST of checkpoint/ into manifests (on the
// lineage or not) and file keys by checkpoint.
func (st *shardState) addCheckpoints(items []blobstore.Attrs) {
	for _, it := range items {
		if p, ok := layout.ParseManifestKey(it.Key); ok {
			st.ckpts = append(st.ckpts, CheckpointInfo{Key: it.Key, Term: p.Term, Gen: p.Gen, OnLineage: st.lin.HasCheckpoint(p.Term, p.Gen)})
		} else if p, ok := layout.ParseFileKey(it.Key); ok {
			st.files[p] = append(st.files[p], it.Key)
		}
	}
}

// readManifests reads each manifest's file count and size; a manifest
// gone or unreadable is reported in its Err.
func (s storeIO) readManifests(ctx context.Context, ckpts []CheckpointInfo) error {
	return parallel(ctx, s.opts.Parallelism, len(ckpts), func(ctx context.Context, i int) error {
		c := &ckpts[i]
		var err error
		c.Err, err = s.inspectRead(ctx, c.Key, func(obj blobstore.Object) error {
			m, err := DecodeManifest(s.shard, c.Key, obj.Body)
			if err == nil {
				c.Files, c.Bytes = len(m.Files), m.Bytes()
			}
			return err
		})
		return err
	})
}

// inspectRead GETs key (retrying store trouble) and hands the object to
// use. A key deleted meanwhile, or an object use refuses, is reported in
// the reason returned, not as an error: Inspect and GC go on without it.
func (s storeIO) inspectRead(ctx context.Context, key string, use func(obj blobstore.Object) error) (reason string, err error) {
	obj, found, err := s.get(ctx, key)
	switch {
	case err != nil:
		return "", err
	case !found:
		return "deleted while inspecting", nil
	}
	if err := use(obj); err != nil {
		return err.Error(), nil
	}
	return "", nil
}

// indexCheckpoints keeps the readable manifests for the completeness
// check of GC's base, and sorts the checkpoints newest generation first
// (the higher term first within one).
func (st *shardState) indexCheckpoints() {
	for _, c := range st.ckpts {
		if c.Err == "" {
			st.manifests[layout.TermGen{Term: c.Term, Gen: c.Gen}] = Manifest{Term: c.Term, Gen: c.Gen}
		}
	}
	sort.Slice(st.ckpts, func(i, j int) bool {
		if st.ckpts[i].Gen != st.ckpts[j].Gen {
			return st.ckpts[i].Gen > st.ckpts[j].Gen
		}
		return st.ckpts[i].Term > st.ckpts[j].Term
	})
}

func (st *shardState) report() *Report {
	rep := &Report{Shard: st.shard, Fence: st.fence, Lineage: st.lin, Checkpoints: st.ckpts, MDs: len(st.mds), DataObjects: len(st.data)}
	for _, m := range st.markers {
		rep.Markers = append(rep.Markers, m)
		if m.Term < st.top && !st.lin.OnChain(m.Term) {
			rep.OffChain = append(rep.OffChain, layout.MarkerKey(m.Term))
		}
	}
	sort.Slice(rep.Markers, func(i, j int) bool { return rep.Markers[i].Term > rep.Markers[j].Term })
	sort.Strings(rep.OffChain)
	rep.Problems = append(rep.Problems, st.badMarker...)
	for _, md := range st.mds {
		switch {
		case md.Err != "":
			rep.Problems = append(rep.Problems, Object{Key: md.Key, Reason: md.Err})
		case md.Poison:
			rep.Poisons = append(rep.Poisons, md)
		case md.Term < st.top && !st.lin.Contains(md.Term, md.Gen):
			rep.Orphans = append(rep.Orphans, Object{Key: md.Key, Reason: orphanReason(st.lin, md.Term)})
		}
	}
	for _, c := range st.ckpts {
		if c.Err != "" {
			rep.Problems = append(rep.Problems, Object{Key: c.Key, Reason: c.Err})
		} else if c.Term < st.top && !c.OnLineage {
			rep.Orphans = append(rep.Orphans, Object{Key: c.Key, Reason: "checkpoint " + orphanReason(st.lin, c.Term)})
		}
	}
	return rep
}

func orphanReason(lin Lineage, term int64) string {
	if lin.OnChain(term) {
		return fmt.Sprintf("past the cut of term %d on the lineage (never acknowledged)", term)
	}
	return fmt.Sprintf("term %d is not on the marker chain (never acknowledged)", term)
}
