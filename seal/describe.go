package seal

import (
	"context"
	"sort"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// Description is what an operator reads of a shard (`shardfence
// inspect`): Inspect's report, the stored fencing settings, and every
// term's translog as listed. Like Inspect it only reads.
type Description struct {
	*Report
	Settings StoredSettings
	// Translog is every term's md keys, newest term first.
	Translog []TermLog
	// Unexpected are keys under the md prefix that are not md keys.
	Unexpected []string
}

// StoredSettings is the shard's settings/fencing as read.
type StoredSettings struct {
	// Found is false when no open created the settings yet.
	Found   bool
	Fencing Fencing
	// Rewrite is the fencing rewrite in progress, nil when none.
	Rewrite *FencingRewrite
	// OutOfRange says why no term opens with the stored lease (nil when
	// it lies within MinLeaseInterval..MaxLeaseInterval).
	OutOfRange error
	// Err is why the settings could not be read; the rest of the
	// description is still read.
	Err error
}

// TermLog is one term's translog as listed: md keys from FirstGen to
// LastGen, Count of them (fewer than the span once GC collected some), and
// the poisons among them.
type TermLog struct {
	Term     int64
	FirstGen int64
	LastGen  int64
	Count    int64
	Poisoned []int64
	// Err is why the term's newest md could not be read, if so.
	Err string
}

// Describe reads what Inspect reads, the stored settings and the md
// listing of every term. A term's poisons are those Inspect found off the
// lineage, and its newest md when that is one (a successor's cut in
// progress): the newest md of each term is read unless Inspect already
// did.
func Describe(ctx context.Context, store *blobstore.Container, shard string, opts Options) (*Description, error) {
	s := storeIO{store: store, shard: shard, opts: opts.withDefaults()}
	d := &Description{}
	f, rw, found, err := ReadFencing(ctx, store, shard, opts)
	d.Settings = StoredSettings{Found: found, Fencing: f, Rewrite: rw, Err: err}
	if found {
		d.Settings.OutOfRange = f.checkRange()
	}
	if d.Report, err = Inspect(ctx, store, shard, opts); err != nil {
		return nil, err
	}
	items, err := s.list(ctx, layout.MDPrefix)
	if err != nil {
		return nil, wrapErr("Inspect", shard, layout.MDPrefix, 0, err)
	}
	// Inverted names list the newest term first, its newest generation
	// first.
	for _, it := range items {
		p, ok := layout.ParseMDKey(it.Key)
		term, gen := p.Term, p.Gen
		if !ok {
			d.Unexpected = append(d.Unexpected, it.Key)
			continue
		}
		if n := len(d.Translog); n == 0 || d.Translog[n-1].Term != term {
			d.Translog = append(d.Translog, TermLog{Term: term, LastGen: gen})
		}
		tl := &d.Translog[len(d.Translog)-1]
		tl.FirstGen = gen
		tl.Count++
	}
	if err := s.markPoisons(ctx, d); err != nil {
		return nil, wrapErr("Inspect", shard, layout.MDPrefix, 0, err)
	}
	return d, nil
}

// markPoisons fills TermLog.Poisoned from the report, reading the newest
// md of each term the report did not read.
func (s storeIO) markPoisons(ctx context.Context, d *Description) error {
	read := map[string]bool{}
	poisons := map[int64][]int64{}
	for _, p := range d.Poisons {
		read[p.Key] = true
		poisons[p.Term] = append(poisons[p.Term], p.Gen)
	}
	for _, o := range append(append([]Object(nil), d.Orphans...), d.Problems...) {
		read[o.Key] = true
	}
	return parallel(ctx, s.opts.Parallelism, len(d.Translog), func(ctx context.Context, i int) error {
		tl := &d.Translog[i]
		tl.Poisoned = poisons[tl.Term]
		defer sort.Slice(tl.Poisoned, func(a, b int) bool { return tl.Poisoned[a] < tl.Poisoned[b] })
		key := layout.MDKey(tl.Term, tl.LastGen)
		if read[key] {
			return nil
		}
		obj, found, err := s.get(ctx, key)
		switch {
		case err != nil:
			return err
		case !found:
			tl.Err = "deleted while inspecting"
			return nil
		}
		md, err := translog.DecodeMD(s.shard, key, obj.Body)
		if err != nil {
			tl.Err = err.Error()
		} else if md.Kind == translog.KindPoison {
			tl.Poisoned = append(tl.Poisoned, tl.LastGen)
		}
		return nil
	})
}
