package seal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/internal/settle"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/translog"
)

// Manifest lists one checkpoint: the shard's state up to Gen, as files.
type Manifest struct {
	Format    string         `json:"format"`
	Version   int            `json:"version"`
	Shard     string         `json:"shard"`
	Term      int64          `json:"term"`
	Gen       int64          `json:"gen"`
	NextSeqNo int64          `json:"next_seq_no"` // the first op after the checkpoint
	Files     []ManifestFile `json:"files"`
}

// ManifestFile is one immutable file of a checkpoint.
type ManifestFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

// Bytes is the total size of the checkpoint's files.
func (m Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

const (
	manifestFormat  = "shardfence.checkpoint"
	manifestVersion = 1
)

// Key is the manifest's key.
func (m Manifest) Key() string { return layout.ManifestKey(m.Term, m.Gen) }

func (m Manifest) validate() error {
	if err := ident.Validate("shard", m.Shard, false); err != nil {
		return err
	}
	if m.Term < 1 || m.Gen < 0 || m.NextSeqNo < 0 {
		return fmt.Errorf("%w: checkpoint term %d gen %d next seq no %d", fence.ErrInvalidArgument, m.Term, m.Gen, m.NextSeqNo)
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		if !filepath.IsLocal(f.Name) || filepath.ToSlash(filepath.Clean(f.Name)) != f.Name || blobstore.ValidateKey(layout.FilePrefix(m.Term, m.Gen)+f.Name) != nil {
			return fmt.Errorf("%w: checkpoint file name %q (a relative path without . or .. segments)", fence.ErrInvalidArgument, f.Name)
		}
		if seen[f.Name] || f.Size < 0 {
			return fmt.Errorf("%w: checkpoint file %q listed twice or with a negative size", fence.ErrInvalidArgument, f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}

// EncodeManifest returns the manifest body (JSON with a format tag and
// version, readable with any store client).
func EncodeManifest(m Manifest) ([]byte, error) {
	m.Format, m.Version = manifestFormat, manifestVersion
	if err := m.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// DecodeManifest parses the manifest stored at key and checks it is
// shard's and the checkpoint the key names. Errors are *fence.BodyError.
func DecodeManifest(shard, key string, body []byte) (Manifest, error) {
	bad := func(err error, format string, args ...any) (Manifest, error) {
		return Manifest{}, &fence.BodyError{Shard: shard, Key: key, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	var m Manifest
	if err := json.Unmarshal(body, &m); err != nil || m.Format != manifestFormat {
		return bad(fence.ErrCorruptBody, "not a checkpoint manifest (%d bytes)", len(body))
	}
	if m.Version != manifestVersion {
		return bad(fence.ErrUnknownVersion, "checkpoint manifest version %d, this build reads %d", m.Version, manifestVersion)
	}
	if err := m.validate(); err != nil {
		return bad(fence.ErrCorruptBody, "%v", err)
	}
	if m.Shard != shard {
		return bad(fence.ErrForeignShard, "checkpoint manifest names shard %q", m.Shard)
	}
	if p, ok := layout.ParseManifestKey(key); ok && (p.Term != m.Term || p.Gen != m.Gen) {
		return bad(fence.ErrForeignShard, "checkpoint of term %d gen %d under the key of term %d gen %d", m.Term, m.Gen, p.Term, p.Gen)
	}
	return m, nil
}

// LocalFile is a file to publish in a checkpoint: Name in the checkpoint,
// read from Path.
type LocalFile struct {
	Name string
	Path string
}

// Proof is the last time the caller's term proved it owns the shard: the
// steady time a successful fence CAS was sent.
type Proof struct {
	At    int64
	Valid bool
}

// PublishOptions configure PublishCheckpoint.
type PublishOptions struct {
	Options
	// Freshness is how long a successful CAS proves the term is not
	// superseded. Default 10s.
	Freshness time.Duration
	// LastCAS is the term's last successful CAS, when known.
	LastCAS Proof
	// NextSeqNo is the sequence number of the first op after gen.
	NextSeqNo int64
}

// publish uploads the named files of fsys as the checkpoint of the chain's
// term at gen, then creates its manifest (PublishCheckpointFS).
func publish(ctx context.Context, store *blobstore.Container, chain *fence.Chain, gen int64, fsys fs.FS, names []string, opts PublishOptions) (Manifest, error) {
	o := opts.Options.withDefaults()
	if opts.Freshness <= 0 {
		opts.Freshness = 10 * time.Second
	}
	s := storeIO{store: store, shard: chain.Shard(), opts: o}
	term := chain.Term()
	key := layout.ManifestKey(term, max(gen, 0))
	fail := func(k string, err error) (Manifest, error) {
		return Manifest{}, wrapErr("Publish", s.shard, k, term, err)
	}
	if err := chain.Err(); err != nil {
		return Manifest{}, err
	}
	m := Manifest{Shard: s.shard, Term: term, Gen: gen, NextSeqNo: opts.NextSeqNo, Files: make([]ManifestFile, len(names))}
	for i, name := range names {
		m.Files[i].Name = name
	}
	if err := m.validate(); err != nil {
		return fail(key, err)
	}
	if !fresh(o.Clock.Now(), opts.LastCAS, opts.Freshness) {
		if h, err := chain.Superseded(ctx); err == nil && h > 0 {
			return fail(key, fmt.Errorf("%w: term %d claimed the shard; this checkpoint would never be used", ErrSuperseded, h))
		}
	}
	// A manifest at this generation already: the same checkpoint again
	// (a retry) is done; a different one is refused before any file is
	// uploaded, since its files would overwrite the published
	// checkpoint's under the manifest that names their checksums.
	if existing, found, err := s.get(ctx, key); err != nil {
		return fail(key, err)
	} else if found {
		for i, name := range names {
			body, err := fs.ReadFile(fsys, name)
			if err != nil {
				return fail(key, fmt.Errorf("checkpoint file %q: %w", name, err))
			}
			m.Files[i].Size, m.Files[i].CRC32C = int64(len(body)), translog.Checksum(body)
		}
		body, err := EncodeManifest(m)
		if err != nil {
			return fail(key, err)
		}
		if !bytes.Equal(body, existing.Body) {
			return fail(key, fmt.Errorf("%w: a different checkpoint of term %d at generation %d exists; checkpoints are immutable: publish at a later generation", ErrCheckpointExists, term, gen))
		}
		m.Format, m.Version = manifestFormat, manifestVersion
		return m, nil
	}
	err := parallel(ctx, o.Parallelism, len(names), func(ctx context.Context, i int) error {
		body, err := fs.ReadFile(fsys, names[i])
		if err != nil {
			return fmt.Errorf("checkpoint file %q: %w", names[i], err)
		}
		m.Files[i].Size, m.Files[i].CRC32C = int64(len(body)), translog.Checksum(body)
		fk := layout.FilePrefix(term, gen) + m.Files[i].Name
		return s.retry(ctx, func(ctx context.Context) error {
			_, err := store.Put(ctx, fk, body)
			return err
		})
	})
	if err != nil {
		return fail(layout.FilePrefix(term, gen), err)
	}
	body, err := EncodeManifest(m)
	if err != nil {
		return fail(key, err)
	}
	step := settle.Step[[]byte]{
		Key: key, Body: body,
		Decode: func(b []byte) ([]byte, error) { return b, nil },
		Ours:   func(found []byte) (bool, string) { return bytes.Equal(found, body), "" },
	}
	err = s.retry(ctx, func(ctx context.Context) error {
		v, err := create(ctx, s, step)
		switch v.Action {
		case settle.Resend:
			return errResend("manifest")
		case settle.Lost:
			return fmt.Errorf("%w: a different checkpoint of term %d at generation %d exists; checkpoints are immutable: publish at a later generation", ErrCheckpointExists, term, gen)
		}
		return err
	})
	if err != nil {
		return fail(key, err)
	}
	m.Format, m.Version = manifestFormat, manifestVersion
	return m, nil
}

// Progress reports a hydration: files and bytes downloaded and verified
// out of the checkpoint's totals.
type Progress struct {
	Checkpoint string
	Files      int
	FilesTotal int
	Bytes      int64
	BytesTotal int64
}

// Refusal is a checkpoint hydration passed over, and why.
type Refusal struct {
	Key    string
	Reason string
}

// CheckpointRef names one checkpoint.
type CheckpointRef struct {
	Term int64
	Gen  int64
}

// Candidates lists the checkpoints on lin at or below gen, newest
// generation first: the order Hydrate tries them in.
func Candidates(ctx context.Context, store *blobstore.Container, shard string, lin Lineage, gen int64, opts Options) ([]CheckpointRef, error) {
	items, err := ListCheckpoints(ctx, store, shard, opts)
	if err != nil {
		return nil, err
	}
	return CandidatesOf(items, lin, gen), nil
}

// ListCheckpoints lists every published checkpoint manifest of the shard
// (any term). recovery.Open sends it beside the seal's walk, once the
// sweep is done, and picks the candidates with CandidatesOf.
func ListCheckpoints(ctx context.Context, store *blobstore.Container, shard string, opts Options) ([]blobstore.Attrs, error) {
	s := storeIO{store: store, shard: shard, opts: opts.withDefaults()}
	items, err := s.list(ctx, layout.ManifestPrefix)
	if err != nil {
		return nil, wrapErr("Hydrate", shard, layout.ManifestPrefix, 0, err)
	}
	return items, nil
}

// CandidatesOf picks, from a listing of manifests (ListCheckpoints), the
// checkpoints on lin at or below gen, newest generation first.
func CandidatesOf(items []blobstore.Attrs, lin Lineage, gen int64) []CheckpointRef {
	cands := []CheckpointRef{}
	for _, it := range items {
		if p, ok := layout.ParseManifestKey(it.Key); ok && p.Gen <= gen && lin.HasCheckpoint(p.Term, p.Gen) {
			cands = append(cands, CheckpointRef{p.Term, p.Gen})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].Gen != cands[j].Gen {
			return cands[i].Gen > cands[j].Gen
		}
		return cands[i].Term > cands[j].Term
	})
	return cands
}

// HydrateOptions configure Hydrate.
type HydrateOptions struct {
	Options
	// Candidates, when not nil, are the checkpoints to try (from
	// Candidates); otherwise Hydrate lists them.
	Candidates []CheckpointRef
	// Progress, when set, is called after every verified file and, while
	// a file streams to a StreamSink, every 4 MiB of it (calls are
	// serialized; Bytes counts what reached the sink).
	Progress func(Progress)
	// Accept, when set, judges a checkpoint whose files all verified, by
	// what only the caller can read in them (a payload that does not
	// decode, say). An error refuses the checkpoint like a corrupt file:
	// its files are removed, the reason recorded in Refused, and the next
	// older candidate tried. paths are where the files were put.
	Accept func(m Manifest, paths []string) error
	// Into, when set, receives the files instead of Hydrate's dir (a
	// MemFiles holds them in memory).
	Into FileSink
	// Manifests holds manifests already read, by key (recovery.Open reads
	// the first candidate's beside the seal marker's create); a candidate
	// found here is not read again.
	Manifests map[string]blobstore.Object
	// ChunkSize splits a file larger than it into pieces of this size,
	// read with concurrent range GETs (pinned to the version the first
	// piece read) and written at their offsets, when the sink takes
	// pieces (a ChunkSink: a local directory does). Parallelism still caps
	// the requests in flight. A piece cut by store trouble is read again
	// from its start, not the whole file. Default 16 MiB; negative: every
	// file in one stream.
	ChunkSize int64
	// Prefetch, when set, is a download started before the candidates
	// were known (PrefetchCheckpoint): Hydrate takes its outcome in place
	// of downloading the first candidate when that is the checkpoint it
	// fetched, and discards it (its files removed) otherwise. Accept
	// still judges it here.
	Prefetch *Prefetch
}

// DefaultChunkSize is HydrateOptions.ChunkSize's default: a 64 MiB file is
// read as four range GETs at once.
const DefaultChunkSize = 16 << 20

// chunkSize is ChunkSize with its default.
func (o HydrateOptions) chunkSize() int64 {
	if o.ChunkSize == 0 {
		return DefaultChunkSize
	}
	return o.ChunkSize
}

// Hydrated is the outcome of Hydrate.
type Hydrated struct {
	// Manifest is the checkpoint hydrated; nil when none was usable.
	Manifest *Manifest
	// Paths are where the files were put (local paths under dir, or what
	// HydrateOptions.Into returned), in manifest order.
	Paths   []string
	Refused []Refusal
}

// Hydrate downloads into dir (or opts.Into) the newest checkpoint on lin at
// or below gen,
// verifying every file's size and checksum. A checkpoint with a missing,
// short or corrupt file (or a corrupt manifest) is refused, its partial
// files removed, and the previous lineage checkpoint tried. Store trouble is
// an error, not a refusal: an older checkpoint would hide it and cost a
// longer replay.
func Hydrate(ctx context.Context, store *blobstore.Container, shard string, lin Lineage, gen int64, dir string, opts HydrateOptions) (*Hydrated, error) {
	s := storeIO{store: store, shard: shard, opts: opts.Options.withDefaults()}
	sink := opts.Into
	if sink == nil {
		sink = dirSink(dir)
	}
	cands := opts.Candidates
	if cands == nil {
		var err error
		if cands, err = Candidates(ctx, store, shard, lin, gen, opts.Options); err != nil {
			opts.Prefetch.Discard()
			return nil, err
		}
	}
	pre := opts.Prefetch
	if pre != nil && (len(cands) == 0 || cands[0] != pre.ref) {
		pre.Discard()
		pre = nil
	}
	out := &Hydrated{}
	for i, c := range cands {
		key := layout.ManifestKey(c.Term, c.Gen)
		var m Manifest
		var paths []string
		var reason string
		if i == 0 && pre != nil {
			// The prefetch fetched this very checkpoint: its outcome is
			// the download's.
			pm, pp, pr, err := pre.wait()
			if err != nil {
				pre.Discard()
				return nil, err
			}
			if pr != "" {
				out.Refused = append(out.Refused, Refusal{Key: key, Reason: pr})
				continue
			}
			m, paths = *pm, pp
		} else {
			obj, found := opts.Manifests[key]
			if !found {
				var err error
				if obj, found, err = s.get(ctx, key); err != nil {
					return nil, wrapErr("Hydrate", shard, key, c.Term, err)
				}
			}
			if !found {
				out.Refused = append(out.Refused, Refusal{Key: key, Reason: "manifest vanished (collected)"})
				continue
			}
			var err error
			m, err = DecodeManifest(shard, key, obj.Body)
			if err != nil {
				out.Refused = append(out.Refused, Refusal{Key: key, Reason: err.Error()})
				continue
			}
			paths, reason, err = s.download(ctx, m, sink, opts.Progress, opts.chunkSize())
			if err != nil {
				return nil, wrapErr("Hydrate", shard, key, c.Term, err)
			}
		}
		if reason != "" {
			out.Refused = append(out.Refused, Refusal{Key: key, Reason: reason})
			continue
		}
		if opts.Accept != nil {
			if err := opts.Accept(m, paths); err != nil {
				if ctx.Err() != nil {
					return nil, wrapErr("Hydrate", shard, key, c.Term, ctx.Err())
				}
				for _, f := range m.Files {
					_ = sink.Remove(f.Name)
				}
				out.Refused = append(out.Refused, Refusal{Key: key, Reason: "refused by the caller: " + err.Error()})
				continue
			}
		}
		out.Manifest, out.Paths = &m, paths
		return out, nil
	}
	return out, nil
}

// slots caps the requests of one download: a file's stream, or one piece
// of a file read in pieces, holds one while it reads.
type slots chan struct{}

func (sl slots) acquire(ctx context.Context) error {
	select {
	case sl <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (sl slots) release() { <-sl }

// streamFile streams one checkpoint file from the store into sink,
// verifying its size before and its checksum while it is written: memory
// stays at the copy buffers whatever the file's size. Store trouble,
// mid-stream too, retries the whole file. A file that is missing, of
// another size or corrupt is bad (its written copy is left for the caller
// to remove: the returned path is set once anything was written).
//
// tick reports bytes as they are written (every progressTick, and a
// negative count when a retry starts the file again).
func (s storeIO) streamFile(ctx context.Context, key string, f ManifestFile, sink StreamSink, sl slots, bad func(string, ...any) error, tick func(int64)) (string, error) {
	var path string
	var counted int64 // bytes of this file reported to tick
	err := s.retry(ctx, func(ctx context.Context) error {
		if counted > 0 {
			tick(-counted)
			counted = 0
		}
		if err := sl.acquire(ctx); err != nil {
			return err
		}
		defer sl.release()
		rc, attrs, err := s.store.NewRangeReader(ctx, key, 0, -1, "")
		switch {
		case errors.Is(err, blobstore.ErrNotFound):
			return bad("missing")
		case err != nil:
			return err
		}
		defer rc.Close()
		if attrs.Size != f.Size {
			return bad("%d bytes, manifest says %d", attrs.Size, f.Size)
		}
		// Checkpoint files are written once; the checksum proves the bytes.
		h := crc32.New(castagnoli)
		cr := &countingReader{r: io.TeeReader(io.LimitReader(rc, f.Size+1), h), tick: func(n int64) { counted += n; tick(n) }}
		p, err := sink.WriteFrom(f.Name, cr)
		cr.flush()
		if p != "" {
			path = p
		}
		if err != nil {
			return err
		}
		switch {
		case cr.n != f.Size:
			return bad("%d bytes streamed, manifest says %d", cr.n, f.Size)
		case h.Sum32() != f.CRC32C:
			return bad("checksum %08x, manifest says %08x", h.Sum32(), f.CRC32C)
		}
		return nil
	})
	return path, err
}

// errVersionChanged: a piece of a file read in pieces found another
// version of the file than the first piece read.
var errVersionChanged = errors.New("checkpoint file replaced in the store while its pieces were read")

// versionAttempts is how many times a file read in pieces starts again
// because its version changed between pieces (checkpoint files are
// immutable: this is a store anomaly, not a normal case).
const versionAttempts = 3

// streamChunks streams one checkpoint file larger than chunk into sink in
// pieces of chunk bytes, read by concurrent range GETs that each hold a
// slot and write at their offset. The first piece's answer checks the size
// against the manifest before anything is written and pins the other
// pieces to the version it read. Each piece's CRC-32C is computed as it
// is written and the pieces' sums are combined, in order, into the file's,
// which must match the manifest: the same checks as streamFile, on the
// same bytes. Store trouble within a piece reads that piece again from its
// start (the rest of the file stays); a version changed between pieces
// starts the whole file again. bad and tick are streamFile's.
func (s storeIO) streamChunks(ctx context.Context, key string, f ManifestFile, sink ChunkSink, chunk int64, sl slots, bad func(string, ...any) error, tick func(int64)) (string, error) {
	var path string
	var counted atomic.Int64 // bytes of this file reported to tick
	count := func(n int64) { counted.Add(n); tick(n) }
	for attempt := 1; ; attempt++ {
		if c := counted.Swap(0); c != 0 {
			tick(-c)
		}
		p, err := s.chunksOnce(ctx, key, f, sink, chunk, sl, bad, count)
		if p != "" {
			path = p
		}
		if !errors.Is(err, errVersionChanged) {
			return path, err
		}
		if attempt == versionAttempts {
			return path, blobstore.Unavailable(fmt.Errorf("%q: %w", key, err))
		}
	}
}

// chunksOnce is one attempt of streamChunks.
func (s storeIO) chunksOnce(ctx context.Context, key string, f ManifestFile, sink ChunkSink, chunk int64, sl slots, bad func(string, ...any) error, count func(int64)) (string, error) {
	// Every piece's stream ends when one piece fails.
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The first piece: its answer says the size and the version.
	var first io.ReadCloser
	var attrs blobstore.Attrs
	err := s.retry(pctx, func(ctx context.Context) error {
		if err := sl.acquire(ctx); err != nil {
			return err
		}
		var err error
		first, attrs, err = s.store.NewRangeReader(ctx, key, 0, chunk, "")
		switch {
		case errors.Is(err, blobstore.ErrNotFound):
			sl.release()
			return bad("missing")
		case err != nil:
			sl.release()
			return err
		}
		if attrs.Size != f.Size {
			first.Close()
			sl.release()
			return bad("%d bytes, manifest says %d", attrs.Size, f.Size)
		}
		return nil // the slot is the first piece's now
	})
	if err != nil {
		return "", err
	}
	out, path, err := sink.CreateSized(f.Name, f.Size)
	if err != nil {
		first.Close()
		sl.release()
		return path, err
	}
	n := int((f.Size + chunk - 1) / chunk)
	sums := make([]uint32, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		var rc io.ReadCloser
		if i == 0 {
			rc = first
		}
		wg.Go(func() {
			sums[i], errs[i] = s.streamPiece(pctx, key, f, int64(i)*chunk, chunk, attrs.Token, rc, out, sl, bad, count)
			if errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	cerr := out.Close()
	// A changed version first (the whole file again), then a definite
	// answer (a refusal: bad), then store trouble; a piece cancelled
	// because another failed says nothing.
	rank := func(e error) int {
		switch {
		case e == nil, errors.Is(e, context.Canceled) && ctx.Err() == nil:
			return 0
		case errors.Is(e, errVersionChanged):
			return 3
		case !blobstore.IsRetryable(e):
			return 2
		}
		return 1
	}
	var picked error
	for _, e := range errs {
		if rank(e) > rank(picked) {
			picked = e
		}
	}
	if picked != nil {
		return path, picked
	}
	if cerr != nil {
		return path, cerr
	}
	sum := sums[0]
	for i := 1; i < n; i++ {
		off := int64(i) * chunk
		sum = crc32cCombine(sum, sums[i], min(chunk, f.Size-off))
	}
	if sum != f.CRC32C {
		return path, bad("checksum %08x, manifest says %08x", sum, f.CRC32C)
	}
	return path, nil
}

// streamPiece writes the piece of the file at off (chunk bytes, fewer for
// the last) into out and returns its CRC-32C. rc, when set, is the
// piece's open stream, with a slot held for it; otherwise the piece opens
// its own, pinned to token. Store trouble reads the piece again from its
// start (its bytes reported to count are taken back first).
func (s storeIO) streamPiece(ctx context.Context, key string, f ManifestFile, off, chunk int64, token blobstore.Token, rc io.ReadCloser, out SizedFile, sl slots, bad func(string, ...any) error, count func(int64)) (uint32, error) {
	length := min(chunk, f.Size-off)
	var sum uint32
	var counted int64 // bytes of this piece reported to count
	err := s.retry(ctx, func(ctx context.Context) error {
		if counted != 0 {
			count(-counted)
			counted = 0
		}
		if rc == nil {
			if err := sl.acquire(ctx); err != nil {
				return err
			}
			var attrs blobstore.Attrs
			var err error
			rc, attrs, err = s.store.NewRangeReader(ctx, key, off, length, token)
			switch {
			case errors.Is(err, blobstore.ErrPreconditionFailed):
				sl.release()
				return errVersionChanged
			case errors.Is(err, blobstore.ErrNotFound):
				sl.release()
				return bad("missing (vanished while its pieces were read)")
			case err != nil:
				sl.release()
				return err
			}
			if attrs.Size != f.Size {
				rc.Close()
				sl.release()
				return errVersionChanged
			}
		}
		defer func() {
			rc.Close()
			rc = nil
			sl.release()
		}()
		h := crc32.New(castagnoli)
		cr := &countingReader{r: io.TeeReader(io.LimitReader(rc, length+1), h), tick: func(n int64) { counted += n; count(n) }}
		got, err := writeFull(cr, io.NewOffsetWriter(out, off), length)
		cr.flush()
		if err != nil {
			return err
		}
		if got != length {
			return bad("%d bytes streamed at offset %d, the manifest's size leaves %d there", got, off, length)
		}
		sum = h.Sum32()
		return nil
	})
	return sum, err
}

// writeFull copies r to w in writes of copyBuffer bytes (fewer only at the
// end), however little each Read of r returns: a network stream's Reads
// give what its socket holds, often a few KiB, and a write system call per
// Read costs more than the bytes. It stops after limit bytes were written
// and one more was read, returning the count read.
func writeFull(r io.Reader, w io.Writer, limit int64) (int64, error) {
	buf := make([]byte, copyBuffer)
	var n int64
	for {
		m, err := io.ReadFull(r, buf)
		if m > 0 {
			n += int64(m)
			if n > limit {
				return n, nil
			}
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, werr
			}
		}
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return n, nil
		default:
			return n, err
		}
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// progressTick is how many bytes of a streaming file go between two
// progress reports.
const progressTick = 4 << 20

type countingReader struct {
	r       io.Reader
	n       int64
	pending int64
	tick    func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.pending += int64(n)
	if c.pending >= progressTick {
		c.flush()
	}
	return n, err
}

func (c *countingReader) flush() {
	if c.pending > 0 {
		c.tick(c.pending)
		c.pending = 0
	}
}

// download fetches m's files into sink in parallel. A definite problem
// with the checkpoint is returned as a reason (and its files removed);
// store trouble as an error.
//
// Files larger than chunk (when positive) go in pieces into a ChunkSink
// (streamChunks). Every request holds one of Parallelism slots while it
// reads, so pieces and files share the same cap.
func (s storeIO) download(ctx context.Context, m Manifest, sink FileSink, progress func(Progress), chunk int64) ([]string, string, error) {
	paths := make([]string, len(m.Files))
	sl := make(slots, max(1, s.opts.Parallelism))
	var mu sync.Mutex
	p := Progress{Checkpoint: m.Key(), FilesTotal: len(m.Files), BytesTotal: m.Bytes()}
	var reason string
	errBad := errors.New("checkpoint refused")
	stream, streaming := sink.(StreamSink)
	chunked, _ := sink.(ChunkSink)
	err := parallel(ctx, s.opts.Parallelism, len(m.Files), func(ctx context.Context, i int) error {
		f := m.Files[i]
		key := layout.FilePrefix(m.Term, m.Gen) + f.Name
		bad := func(format string, args ...any) error {
			mu.Lock()
			if reason == "" {
				reason = fmt.Sprintf("file %q: ", key) + fmt.Sprintf(format, args...)
			}
			mu.Unlock()
			return errBad
		}
		report := func(files int, bytes int64) {
			mu.Lock()
			p.Files += files
			p.Bytes += bytes
			if progress != nil {
				progress(p)
			}
			mu.Unlock()
		}
		done := func(path string) {
			paths[i] = path
			report(1, f.Size)
		}
		if streaming {
			tick := func(n int64) { report(0, n) }
			var path string
			var err error
			if chunked != nil && chunk > 0 && f.Size > chunk {
				path, err = s.streamChunks(ctx, key, f, chunked, chunk, sl, bad, tick)
			} else {
				path, err = s.streamFile(ctx, key, f, stream, sl, bad, tick)
			}
			if !errors.Is(err, blobstore.ErrUnsupported) {
				if path != "" {
					paths[i] = path // removed below if the checkpoint is refused
				}
				if err == nil {
					report(1, 0) // its bytes were reported as they streamed
				}
				return err
			}
			// A store without streaming reads: the whole body, below.
		}
		if err := sl.acquire(ctx); err != nil {
			return err
		}
		obj, found, err := s.get(ctx, key)
		sl.release()
		if err != nil {
			return err
		}
		switch {
		case !found:
			return bad("missing")
		case int64(len(obj.Body)) != f.Size:
			return bad("%d bytes, manifest says %d", len(obj.Body), f.Size)
		case translog.Checksum(obj.Body) != f.CRC32C:
			return bad("checksum %08x, manifest says %08x", translog.Checksum(obj.Body), f.CRC32C)
		}
		path, err := sink.WriteFile(f.Name, obj.Body)
		if err != nil {
			return err
		}
		done(path)
		return nil
	})
	if errors.Is(err, errBad) {
		for i, path := range paths {
			if path != "" {
				_ = sink.Remove(m.Files[i].Name)
			}
		}
		return nil, reason, nil
	}
	return paths, "", err
}
