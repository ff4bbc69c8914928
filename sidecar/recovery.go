package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// fileChunk bounds one streamed piece of a checkpoint file.
const fileChunk = 1 << 20

// recoveryOpener opens shards through the protocol's recovery path: claim,
// lease wait, seal, hydrate, replay, open the writer.
type recoveryOpener struct{}

func (recoveryOpener) Open(ctx context.Context, store *blobstore.Container, p openParams, events func(openEvent) error) (*opened, error) {
	if err := events(openEvent{Progress: &Progress{Step: "claim"}}); err != nil {
		return nil, err
	}
	if p.Warm {
		return openWarm(ctx, store, p, events)
	}
	// The checkpoint streams from the store to a fresh folder (memory
	// stays at the copy buffers whatever its size), then from there to
	// the primary; the folder goes when the open ends.
	dir, err := os.MkdirTemp(p.HydrateDir, "shardfence-open-")
	if err != nil {
		return nil, fmt.Errorf("%w: a folder to hydrate the checkpoint into: %w", blobstore.ErrUnavailable, err)
	}
	defer os.RemoveAll(dir)
	files := os.DirFS(dir)
	var (
		mu        sync.Mutex
		eventErr  error
		filesSent bool
	)
	// Files go out before the first replayed op, so a primary applies the
	// ops on top of the checkpoint they follow.
	sendFiles := func() error {
		if filesSent {
			return nil
		}
		filesSent = true
		return streamFiles(files, events)
	}
	wo := p.Settings.writerOptions(p, 0, 0)
	opts := recovery.Options{
		Node: p.Node,
		Dir:  dir,
		Apply: func(_ context.Context, b translog.Batch) error {
			mu.Lock()
			defer mu.Unlock()
			if err := sendFiles(); err != nil {
				return err
			}
			return events(openEvent{Ops: &b})
		},
		Progress: func(pr recovery.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if eventErr != nil {
				return
			}
			ev := &Progress{Step: pr.Phase, Done: int64(pr.Files), Total: int64(pr.FilesTotal), Bytes: pr.Bytes}
			if pr.Phase == "replay" {
				ev.Done, ev.Total = pr.Gens, pr.GensTotal
			}
			eventErr = events(openEvent{Progress: ev})
		},
		Writer: wo,
	}
	sh, err := recovery.Open(ctx, store, p.Shard, p.Term, p.Allocation, opts)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	err = errors.Join(eventErr, sendFiles())
	mu.Unlock()
	if err == nil {
		err = events(openEvent{Progress: &Progress{Step: "open", Done: 1, Total: 1}})
	}
	if err != nil {
		// The caller went away mid-open: the term stays claimed and
		// sealed, and a retried Open of the same term adopts it.
		_ = sh.Writer.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	rp := sh.Restore()
	o := &opened{
		Writer: sh.Writer, Chain: sh.Chain, StartGen: rp.Gen + 1, Fencing: sh.Fencing,
		Restore: RestorePoint{Term: rp.Term, Gen: rp.Gen, NextSeqNo: sh.NextSeqNo}, Lineage: sh.Seal.Lineage,
	}
	if sh.Checkpoint != nil {
		o.Restore.CheckpointGen = sh.Checkpoint.Gen
	}
	return o, nil
}

// Adopt takes the shard over from a handoff's source: the writer runs the
// shard's stored fencing (relocation.Adopt enforces it too), and the
// newest seal marker must be the handed-off term's, whose lineage the
// target then reads up to hc.Gen. That lineage is read before the chain is
// taken.
func (recoveryOpener) Adopt(ctx context.Context, store *blobstore.Container, hc relocation.HandoffContext, p openParams) (*opened, error) {
	fencing, err := seal.ShardFencing(ctx, store, p.Shard, seal.FencingOf(p.Settings.WriterOptions()), seal.Options{})
	if err != nil {
		return nil, err
	}
	rep, err := seal.Inspect(ctx, store, p.Shard, seal.Options{})
	if err != nil {
		return nil, err
	}
	if len(rep.Lineage.Chain) == 0 || rep.Lineage.Chain[0].Term != hc.Term {
		return nil, fmt.Errorf("%w: the shard's newest seal marker is not of handed-off term %d", fence.ErrFenced, hc.Term)
	}
	chain, w, err := relocation.Adopt(ctx, store, p.Allocation, hc, relocation.AdoptOptions{
		Node: p.Node, Writer: p.Settings.withFencing(fencing).WriterOptions(),
	})
	if err != nil {
		return nil, err
	}
	return &opened{
		Writer: w, Chain: chain, StartGen: hc.Gen + 1, Fencing: fencing, Lineage: rep.Lineage,
		Restore: RestorePoint{Term: hc.Term, Gen: hc.Gen, NextSeqNo: hc.NextSeqNo},
	}, nil
}

// streamFiles sends the hydrated checkpoint's files, in name order.
func streamFiles(files fs.FS, events func(openEvent) error) error {
	var names []string
	err := fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checkpoint files: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := streamFile(files, name, events); err != nil {
			return err
		}
	}
	return nil
}

// streamFile sends the file name of fsys in chunks of at most fileChunk
// bytes; the last chunk says so (an empty file is one empty chunk).
func streamFile(fsys fs.FS, name string, events func(openEvent) error) error {
	f, err := fsys.Open(name)
	if err != nil {
		return fmt.Errorf("checkpoint file: %w", err)
	}
	defer f.Close()
	buf := make([]byte, fileChunk)
	for off := int64(0); ; {
		n, err := io.ReadFull(f, buf)
		last := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !last {
			return fmt.Errorf("checkpoint file %s: %w", name, err)
		}
		chunk := &FileChunk{Name: name, Offset: off, Data: append([]byte(nil), buf[:n]...), Last: last}
		if err := events(openEvent{File: chunk}); err != nil {
			return err
		}
		if last {
			return nil
		}
		off += int64(n)
	}
}

// openWarm is a warm open: recovery.Open runs for the shard (its context
// outlives the call), chooses the checkpoint after the seal without
// hydrating it (pickCheckpoint), and the call returns right there with the
// restore point and the manifest; the replay after the checkpoint and the
// writer's opening go on, and end on the returned channel. A call that
// ends before the seal is done cancels the recovery: the term stays
// claimed, and an Open of the same term and allocation takes it again.
func openWarm(ctx context.Context, store *blobstore.Container, p openParams, events func(openEvent) error) (*opened, error) {
	type start struct {
		sh *recovery.Shard
		m  *seal.Manifest
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	started := make(chan start, 1)
	done := make(chan replayed, 1)
	opts := recovery.Options{
		Node:   p.Node,
		Writer: p.Settings.writerOptions(p, 0, 0),
		Lazy: func(ctx context.Context, sh *recovery.Shard, cands []seal.CheckpointRef) (*seal.Manifest, error) {
			m, err := pickCheckpoint(ctx, store, p.Shard, cands)
			if err != nil {
				return nil, err
			}
			// Without a checkpoint the replay starts at generation 1,
			// which a lineage whose oldest markers were collected cannot
			// serve: recovery.Open fails, and so does this call.
			if m != nil || sh.Restore().Gen == 0 || sh.Seal.Lineage.Base() == 0 {
				started <- start{sh, m}
			}
			return m, nil
		},
	}
	go func() {
		sh, err := recovery.Open(bg, store, p.Shard, p.Term, p.Allocation, opts)
		if err != nil {
			done <- replayed{Err: err}
			return
		}
		done <- replayed{Writer: sh.Writer, NextSeqNo: sh.NextSeqNo}
	}()
	var st start
	select {
	case st = <-started:
	case r := <-done:
		// The replay may end as soon as the choice was made.
		select {
		case st = <-started:
			done = make(chan replayed, 1)
			done <- r
		default:
			cancel()
			if r.Err == nil {
				_ = r.Writer.Close(context.WithoutCancel(ctx))
				r.Err = fmt.Errorf("%w: the warm open ended without choosing a checkpoint", ErrNotAvailable)
			}
			return nil, r.Err
		}
	case <-ctx.Done():
		cancel()
		if r := <-done; r.Writer != nil {
			_ = r.Writer.Close(context.WithoutCancel(ctx))
		}
		return nil, ctx.Err()
	}
	if err := events(openEvent{Progress: &Progress{Step: "open", Done: 1, Total: 1}}); err != nil {
		cancel()
		if r := <-done; r.Writer != nil {
			_ = r.Writer.Close(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	rp := st.sh.Restore()
	o := &opened{
		Chain: st.sh.Chain, StartGen: rp.Gen + 1, Fencing: st.sh.Fencing, Lineage: st.sh.Seal.Lineage,
		Restore: RestorePoint{Term: rp.Term, Gen: rp.Gen},
		Warm:    &warmStart{Manifest: st.m, Replayed: done, Cancel: cancel},
	}
	if st.m != nil {
		o.Restore.CheckpointGen = st.m.Gen
	}
	return o, nil
}

// pickCheckpoint chooses the checkpoint a warm open serves: the newest
// candidate whose manifest decodes and whose files are all stored with
// the manifest's sizes (one LIST), nil when none is. Their checksums are
// checked as the files are read. Store trouble is an error, not a reason
// to take an older checkpoint.
func pickCheckpoint(ctx context.Context, store *blobstore.Container, shard string, cands []seal.CheckpointRef) (*seal.Manifest, error) {
	clock, bo := clock.System(), backoff.Store()
	for _, c := range cands {
		key := layout.ManifestKey(c.Term, c.Gen)
		var obj blobstore.Object
		err := backoff.Do(ctx, clock, bo, blobstore.IsRetryable, func(ctx context.Context) (err error) {
			obj, err = store.Get(ctx, key)
			return err
		})
		if errors.Is(err, blobstore.ErrNotFound) {
			continue // collected meanwhile
		}
		if err != nil {
			return nil, err
		}
		m, err := seal.DecodeManifest(shard, key, obj.Body)
		if err != nil {
			continue
		}
		prefix := layout.FilePrefix(c.Term, c.Gen)
		var items []blobstore.Attrs
		if err := backoff.Do(ctx, clock, bo, blobstore.IsRetryable, func(ctx context.Context) (err error) {
			items, err = blobstore.ListAll(ctx, store, prefix)
			return err
		}); err != nil {
			return nil, err
		}
		sizes := make(map[string]int64, len(items))
		for _, it := range items {
			sizes[it.Key] = it.Size
		}
		complete := true
		for _, f := range m.Files {
			if sz, ok := sizes[prefix+f.Name]; !ok || sz != f.Size {
				complete = false
				break
			}
		}
		if complete {
			return &m, nil
		}
	}
	return nil, nil
}
