package seal

import (
	"context"
	"sync"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/layout"
)

// Checkpoint is the checkpoint the survey expects to be the first
// candidate of the restore point: the newest one it listed of the
// predecessor it guessed, at or past that term's own restore point. Every
// restore point the seal can reach from the guess holds it (the walk
// starts at the newest checkpoint of the lineage term, section 5), so it
// is the newest candidate whenever the guess is the lineage term. ok is
// false when the survey holds no such checkpoint.
func (sv *Survey) Checkpoint() (ref CheckpointRef, ok bool) {
	if sv == nil || sv.guessed == nil {
		return CheckpointRef{}, false
	}
	for _, a := range sv.guessCkpts {
		p, isManifest := layout.ParseManifestKey(a.Key)
		if !isManifest || p.Term != sv.guess || p.Gen < sv.guessed.Restore.Gen || p.Gen < 1 {
			continue
		}
		if !ok || p.Gen > ref.Gen {
			ref, ok = CheckpointRef{Term: p.Term, Gen: p.Gen}, true
		}
	}
	return ref, ok
}

// Prefetch is the download of one checkpoint started before it is known
// to be the one to hydrate: recovery.Open starts it beside the seal, from
// the survey's guess (Survey.Checkpoint), so the files download while the
// seal's walk and marker are on their way. Hydrate takes it over
// (HydrateOptions.Prefetch) when the checkpoint is its first candidate,
// and discards it otherwise. It only reads the store; what is hydrated is
// decided by Hydrate from the sealed lineage, as without it.
type Prefetch struct {
	ref    CheckpointRef
	sink   FileSink
	cancel context.CancelFunc
	done   chan struct{}

	// Set once done is closed.
	manifest *Manifest
	paths    []string
	reason   string // the checkpoint is refused: why
	err      error  // store trouble

	removeOnce sync.Once
}

// PrefetchCheckpoint GETs the manifest of ref and downloads its files into
// dir (or opts.Into), verifying each as Hydrate does, in the background.
// Only opts.Options, Into and Progress are used. The caller hands the
// result to Hydrate (HydrateOptions.Prefetch) or calls Discard.
func PrefetchCheckpoint(ctx context.Context, store *blobstore.Container, shard string, ref CheckpointRef, dir string, opts HydrateOptions) *Prefetch {
	s := storeIO{store: store, shard: shard, opts: opts.Options.withDefaults()}
	p := &Prefetch{ref: ref, sink: opts.Into, done: make(chan struct{})}
	if p.sink == nil {
		p.sink = dirSink(dir)
	}
	ctx, p.cancel = context.WithCancel(ctx)
	go func() {
		defer close(p.done)
		key := layout.ManifestKey(ref.Term, ref.Gen)
		obj, found, err := s.get(ctx, key)
		switch {
		case err != nil:
			p.err = wrapErr("Hydrate", shard, key, ref.Term, err)
			return
		case !found:
			p.reason = "manifest vanished (collected)"
			return
		}
		m, err := DecodeManifest(shard, key, obj.Body)
		if err != nil {
			p.reason = err.Error()
			return
		}
		p.manifest = &m
		p.paths, p.reason, p.err = s.download(ctx, m, p.sink, opts.Progress, opts.chunkSize())
		if p.err != nil {
			p.err = wrapErr("Hydrate", shard, key, ref.Term, p.err)
		}
	}()
	return p
}

// Ref is the checkpoint being prefetched.
func (p *Prefetch) Ref() CheckpointRef { return p.ref }

// Done is closed once the download ended (downloaded, refused, or stopped
// by store trouble or Discard).
func (p *Prefetch) Done() <-chan struct{} { return p.done }

// Discard stops the download, waits for it and removes every file it
// wrote. Safe to call more than once, and on a nil Prefetch.
func (p *Prefetch) Discard() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
	p.removeOnce.Do(func() {
		if p.manifest == nil {
			return
		}
		for _, f := range p.manifest.Files {
			_ = p.sink.Remove(f.Name)
		}
	})
}

// wait returns the prefetch's outcome: the manifest and where its files
// went, a reason it is refused, or store trouble.
func (p *Prefetch) wait() (*Manifest, []string, string, error) {
	<-p.done
	p.cancel()
	return p.manifest, p.paths, p.reason, p.err
}
