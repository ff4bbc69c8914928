package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/translog"
)

// fileChunk bounds one streamed piece of a checkpoint file.
const fileChunk = 1 << 20

// recoveryOpener opens shards through the protocol's recovery path: claim,
// lease wait, seal, hydrate, replay, open the writer.
type recoveryOpener struct {
	// tmpDir is where checkpoints are hydrated before they are streamed;
	// empty means the system's temporary folder.
	tmpDir string
}

func (r recoveryOpener) Open(ctx context.Context, store *blobstore.Container, p openParams, events func(openEvent) error) (*opened, error) {
	if err := events(openEvent{Progress: &Progress{Step: "claim"}}); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(r.tmpDir, "shardfence-hydrate-")
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	defer os.RemoveAll(dir)

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
		return streamFiles(dir, events)
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

// streamFiles sends the files under dir, in name order, in chunks.
func streamFiles(dir string, events func(openEvent) error) error {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			names = append(names, path)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint folder: %w", err)
	}
	buf := make([]byte, fileChunk)
	for _, path := range names {
		rel, _ := filepath.Rel(dir, path)
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("checkpoint file: %w", err)
		}
		off := int64(0)
		for {
			n, rerr := io.ReadFull(f, buf)
			last := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
			if rerr != nil && !last {
				f.Close()
				return fmt.Errorf("checkpoint file %s: %w", rel, rerr)
			}
			chunk := &FileChunk{Name: filepath.ToSlash(rel), Offset: off, Data: append([]byte(nil), buf[:n]...), Last: last}
			if err := events(openEvent{File: chunk}); err != nil {
				f.Close()
				return err
			}
			off += int64(n)
			if last {
				break
			}
		}
		f.Close()
	}
	return nil
}
