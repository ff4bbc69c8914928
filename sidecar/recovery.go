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
	"github.com/shardfence/shardfence/fence"
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
