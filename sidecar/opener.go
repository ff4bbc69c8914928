package sidecar

import (
	"context"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// openParams is what Open hands the lifecycle: who claims which term, and
// the settings the writer is fixed with.
type openParams struct {
	Shard      string
	Term       int64
	Allocation string
	Node       string
	Settings   Settings
	// HydrateDir is where an open makes its folder for the checkpoint
	// (Options.HydrateDir).
	HydrateDir string
	// Warm asks for a warm open (OpenRequest.warm): the opener returns
	// once the seal is done and the checkpoint chosen, with Warm set, and
	// replays in the background.
	Warm bool
}

// RestorePoint is where a shard's lineage ended when its term opened.
type RestorePoint struct {
	Term          int64
	Gen           int64
	NextSeqNo     int64
	CheckpointGen int64
}

// openEvent is one step of an open the caller sees: progress, a restored
// checkpoint file chunk, or a batch of replayed ops. Exactly one is set.
type openEvent struct {
	Progress *Progress
	File     *FileChunk
	Ops      *translog.Batch
}

// Progress reports how far an open got.
type Progress struct {
	Step  string // claim, seal, hydrate, replay, open
	Done  int64
	Total int64
	Bytes int64
}

// FileChunk is part of a restored checkpoint file.
type FileChunk struct {
	Name   string
	Offset int64
	Data   []byte
	Last   bool
}

// opened is a shard the lifecycle opened for appends.
type opened struct {
	Writer  *translog.Writer
	Chain   *fence.Chain // nil when fencing is disabled
	Restore RestorePoint
	// StartGen is the first generation this writer writes.
	StartGen int64
	// Fencing is the shard's stored fencing, which the writer runs
	// whatever the open asked for.
	Fencing seal.Fencing
	// Lineage is the lineage the term inherited (empty for a new shard);
	// Read reads it up to the restore point.
	Lineage seal.Lineage
	// Warm is set by a warm open, whose Writer is nil until the replay
	// ends (Restore.NextSeqNo is 0 until then).
	Warm *warmStart
}

// warmStart is what a warm open leaves running: the replay of the
// translog after the checkpoint, which ends with the writer.
type warmStart struct {
	// Manifest is the checkpoint served on demand (nil: none).
	Manifest *seal.Manifest
	// Replayed delivers the replay's end once.
	Replayed <-chan replayed
	// Cancel stops the replay (the shard closed or was replaced).
	Cancel context.CancelFunc
}

// replayed is the end of a warm open's replay: the writer and the first
// sequence number of the term, or why it failed.
type replayed struct {
	Writer    *translog.Writer
	NextSeqNo int64
	Err       error
}

// shardOpener is the one seam between the service and the protocol
// packages: everything that claims, seals, restores, adopts or reads
// across terms goes through it, so the service holds no protocol
// decisions of its own. The service decides only whether a shard's slot
// may be taken (the registry) and what the caller hears.
type shardOpener interface {
	// Open claims p.Term for p.Allocation, seals the predecessors, restores
	// the lineage (emitting it through events) and opens a writer at the
	// restore point's generation + 1. An error from events aborts the open.
	Open(ctx context.Context, store *blobstore.Container, p openParams, events func(openEvent) error) (*opened, error)
	// Adopt continues the handed-off term of hc as its target p.Allocation
	// (hc.Target): same term, the fence chain taken at hc's token, a writer
	// at hc.Gen + 1. A key that moved on, or a newest seal marker of
	// another term, is a *fence.FencedError.
	Adopt(ctx context.Context, store *blobstore.Container, hc relocation.HandoffContext, p openParams) (*opened, error)
}

// defaultOpener is the production lifecycle: the recovery path, and the
// relocation path for handoffs.
func defaultOpener() shardOpener { return recoveryOpener{} }
