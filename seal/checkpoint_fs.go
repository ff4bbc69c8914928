package seal

import (
	"context"
	"io/fs"
	"path/filepath"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
)

// PublishCheckpoint uploads files as the checkpoint of the chain's term at
// gen (every op up to gen must be in them, and gen must be acknowledged),
// then creates its manifest. The gate: a successful CAS within the
// freshness interval, else a LIST of fence/ for a higher term (refused with
// ErrSuperseded); an unreadable fence publishes anyway, because a
// checkpoint off the lineage is never used and GC removes it.
func PublishCheckpoint(ctx context.Context, store *blobstore.Container, chain *fence.Chain, gen int64, files []LocalFile, opts PublishOptions) (Manifest, error) {
	local := localFiles{}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = filepath.ToSlash(f.Name)
		local[names[i]] = f.Path
	}
	return publish(ctx, store, chain, gen, local, names, opts)
}

// PublishCheckpointFS is PublishCheckpoint of every regular file of fsys,
// named by its path in fsys: os.DirFS of a local directory, or a MemFiles
// (the sidecar publishes a request's files without writing them locally).
func PublishCheckpointFS(ctx context.Context, store *blobstore.Container, chain *fence.Chain, gen int64, fsys fs.FS, opts PublishOptions) (Manifest, error) {
	var names []string
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			names = append(names, name)
		}
		return err
	})
	if err != nil {
		return Manifest{}, wrapErr("Publish", chain.Shard(), "", chain.Term(), err)
	}
	return publish(ctx, store, chain, gen, fsys, names, opts)
}
