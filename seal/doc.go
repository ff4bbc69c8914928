// Package seal is what a new term does between its claim and its first
// write (the fencing protocol, sections 4-7): it resolves the lineage it
// inherits by following the chain of seal markers, poisons the first
// missing generation of the lineage term so a zombie primary can never
// complete an acknowledgement the restore point lacks, and records the
// restore point in its own immutable marker. It also owns what depends on
// the lineage: checkpoints (published and selected only on it), orphans
// (every md or checkpoint of a lower term off it), the shard's fencing
// settings, Inspect (and Describe, what `shardfence inspect` shows), GC,
// and what a term open for writes may read back (History.Ranges).
// Checkpoints are published from an fs.FS and hydrated into a directory or
// a FileSink (MemFiles holds them in memory).
//
// The decisions are pure over what was read: the order of a seal's steps
// is a planner (sealplan.go: sealPlan names the lineage term and the
// marker, walk finds the cut), and ChainFrom, LineageOf, Lineage.Contains,
// ContiguousAfter and PlanGC decide the rest. Seal and the other calls are
// drivers that do the I/O, through a blobstore.Container only, so a checker
// can drive the same code over a controlled store. Every object seal
// creates (poison, marker, manifest, fencing settings) goes through the
// shared create-if-absent-then-settle step (internal/settle).
package seal
