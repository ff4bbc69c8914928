// Package seal is what a new term does between its claim and its first
// write (the fencing protocol, sections 4-7): it resolves the lineage it
// inherits by following the chain of seal markers, poisons the first
// missing generation of the lineage term so a zombie primary can never
// complete an acknowledgement the restore point lacks, and records the
// restore point in its own immutable marker. It also owns what depends on
// the lineage: checkpoints (published and selected only on it), orphans
// (every md or checkpoint of a lower term off it), Inspect (and Describe,
// what `shardfence inspect` shows), GC, and what a term open for writes
// may read back (History.Ranges). Checkpoints are published from an fs.FS
// and hydrated into a directory or a FileSink (MemFiles holds them in
// memory).
//
// The decisions are pure functions over what was read (ChainFrom,
// LineageOf, Lineage.Contains, ContiguousAfter, PlanGC); the I/O around
// them goes through a
// blobstore.Container only, so a checker can drive the same code over a
// controlled store.
package seal
