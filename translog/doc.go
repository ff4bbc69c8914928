// Package translog is the fenced append log of a shard (the fencing
// protocol, section 3): many concurrent appends coalesce into one sync, a
// sync writes one immutable md object (ops inline when small, else a data
// object first) and advances the term's fence chain, and an op is
// acknowledged only when both landed and every lower generation was
// acknowledged.
//
// The md object is created if absent, never overwritten: a successor that
// finds a generation missing creates a poison md there, so a zombie writer's
// late md create fails and it never acknowledges what the successor's
// restore point lacks. That is what lets the md create and the fence CAS run
// in parallel (one round trip per sync) without losing acknowledged writes.
//
// The write path is a pure pipeline and a thin driver. The pipeline
// (pipeline.go) holds the writer's state and decides everything: admission
// against the in-flight limit, batch cutting and the gather delay, the
// order of a sync's requests (unfenced, per-sync concurrent and pipelined,
// sequenced, lease renewal, inside the lease), lease coverage,
// acknowledgement in generation order, and fencing as terminal; its tests
// step it by hand. The Writer (writer.go) drives it: it owns the committer
// and md goroutines, the lock and the clock, and runs the store requests
// (steps.go: the data PUT, the md create settled by content, the fence
// CAS), each retried for as long as the writer is open.
//
// The keys are package layout's; MDKey, DataKey and the prefixes here name
// them for callers of this package.
package translog
