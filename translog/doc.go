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
package translog
