package translog

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

// Batch is the ops of one generation.
type Batch struct {
	Term       int64
	Gen        int64
	FirstSeqNo int64
	Ops        [][]byte
}

// Reader reads a shard's translog. It follows no lineage of its own: the
// caller (restore, inspect) says which term and generations to read.
type Reader struct {
	store *blobstore.Container
	shard string
}

// NewReader returns a reader of shard's translog in store (a container
// scoped to the shard's prefix).
func NewReader(store *blobstore.Container, shard string) *Reader {
	return &Reader{store: store, shard: shard}
}

// Gens lists the generations of term that have an md (sync or poison),
// ascending.
func (r *Reader) Gens(ctx context.Context, term int64) ([]int64, error) {
	prefix := layout.MDTermPrefix(term)
	items, err := blobstore.ListAll(ctx, r.store, prefix)
	if err != nil {
		return nil, r.err(prefix, 0, err)
	}
	gens := make([]int64, 0, len(items))
	// Inverted names list the newest first; walk backwards for ascending.
	for i := len(items) - 1; i >= 0; i-- {
		p, ok := layout.ParseMDKey(items[i].Key)
		if ok && p.Term == term {
			gens = append(gens, p.Gen)
		}
	}
	return gens, nil
}

// ReadMD reads and verifies the md of (term, gen). A missing md is
// ErrMissingGen.
func (r *Reader) ReadMD(ctx context.Context, term, gen int64) (MD, error) {
	key := layout.MDKey(term, gen)
	obj, err := r.store.Get(ctx, key)
	if errors.Is(err, blobstore.ErrNotFound) {
		return MD{}, r.err(key, gen, fmt.Errorf("%w: no md for generation %d of term %d", ErrMissingGen, gen, term))
	}
	if err != nil {
		return MD{}, r.err(key, gen, err)
	}
	return DecodeMD(r.shard, key, obj.Body)
}

// ReadBatch reads the ops of (term, gen), from the md or its data object,
// and verifies the payload checksum. A poison is ErrPoisoned.
func (r *Reader) ReadBatch(ctx context.Context, term, gen int64) (Batch, error) {
	md, err := r.ReadMD(ctx, term, gen)
	if err != nil {
		return Batch{}, err
	}
	key := layout.MDKey(term, gen)
	if md.Kind == KindPoison {
		return Batch{}, r.err(key, gen, fmt.Errorf("%w: generation %d of term %d sealed by term %d", ErrPoisoned, gen, term, md.SealedBy))
	}
	var data []byte
	if !md.Inline {
		dkey := layout.DataKey(term, gen)
		obj, err := r.store.Get(ctx, dkey)
		if errors.Is(err, blobstore.ErrNotFound) {
			return Batch{}, r.err(dkey, gen, fmt.Errorf("%w: md %q refers to a data object that does not exist", fence.ErrCorruptBody, key))
		}
		if err != nil {
			return Batch{}, r.err(dkey, gen, err)
		}
		data = obj.Body
	}
	return BatchOf(r.shard, md, data)
}

// BatchOf decodes the ops of sync md: from its inline payload, or from
// data, the body of its data object (layout.DataKey), which must decode
// and match the md's payload length and checksum. Every error is a
// *fence.BodyError (a body that cannot be trusted).
func BatchOf(shard string, md MD, data []byte) (Batch, error) {
	key := layout.MDKey(md.Term, md.Gen)
	payload := md.Payload
	if !md.Inline {
		dkey := layout.DataKey(md.Term, md.Gen)
		var err error
		if payload, err = DecodeData(shard, dkey, md.Term, md.Gen, data); err != nil {
			return Batch{}, err
		}
		if int64(len(payload)) != md.PayloadLen || Checksum(payload) != md.Checksum {
			return Batch{}, &fence.BodyError{Shard: shard, Key: dkey, Err: fence.ErrCorruptBody,
				Detail: fmt.Sprintf("payload of %d bytes with checksum %08x, md %q says %d bytes with %08x", len(payload), Checksum(payload), key, md.PayloadLen, md.Checksum)}
		}
	}
	ops, err := DecodeOps(payload, md.OpCount)
	if err != nil {
		return Batch{}, &fence.BodyError{Shard: shard, Key: key, Err: fence.ErrCorruptBody, Detail: err.Error()}
	}
	return Batch{Term: md.Term, Gen: md.Gen, FirstSeqNo: md.FirstSeqNo, Ops: ops}, nil
}

// Iterate calls fn with the batches of generations from..to of term, in
// order. Every generation must exist and verify; the first gap, poison or
// bad body stops the walk with an error naming its key.
func (r *Reader) Iterate(ctx context.Context, term, from, to int64, fn func(Batch) error) error {
	if from < 1 || to < from-1 {
		return r.err(layout.MDTermPrefix(term), 0, fmt.Errorf("%w: generations %d..%d", fence.ErrInvalidArgument, from, to))
	}
	next := int64(-1)
	for g := from; g <= to; g++ {
		b, err := r.ReadBatch(ctx, term, g)
		if err != nil {
			return err
		}
		// Sequence numbers run on without gaps or overlaps from one
		// generation to the next; a break means a foreign writer's md.
		if next >= 0 && b.FirstSeqNo != next {
			return &fence.BodyError{Shard: r.shard, Key: layout.MDKey(term, g), Err: fence.ErrCorruptBody,
				Detail: fmt.Sprintf("first sequence number %d, the previous generation ends before %d", b.FirstSeqNo, next)}
		}
		next = b.FirstSeqNo + int64(len(b.Ops))
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reader) err(key string, gen int64, err error) error {
	return &Error{Op: "Read", Shard: r.shard, Key: key, Gen: gen, Err: err}
}
