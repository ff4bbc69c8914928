// Package master is the control plane of the memory tier: clients mount
// memory segments, objects live as replicas on those segments, and the master
// places replicas, grants read leases that keep objects from eviction, evicts
// under memory pressure, and rebuilds its state after a failover.
//
// Lease and soft-pin deadlines are steady-clock values (see Clock): a wall
// clock jump never shortens or extends a lease, and a steady value never leaves
// the process. The standby wire model (StandbyObject) therefore carries hard
// pin and soft-pin enabled but never a deadline; objects restored from it are
// unreadable until their segment is remounted, and an unreadable replica is
// never evicted (see evictableReplica).
//
// Every durable state change (mount, unmount, remount, put end/revoke,
// remove, evict, restore) is described as an Op, in the standby wire model,
// and handed to the Journal inside the critical section that made it, so
// records of one key arrive in the order they were applied, and before it
// frees any memory. The call that made the change waits, with its locks
// released, for the Journal's Ticket before it answers: nothing is
// acknowledged before the log holds it. A put in progress is not logged,
// but placement waits until every earlier change is durable. Lease grants
// are never logged. Ops travel in the standby wire format (EncodeEntry,
// DecodeEntry), and a standby applies them with ReplayStandby. Package ha
// provides the Journal: a fenced translog shard in the store.
//
// Complete snapshots (Freeze, Snapshot.WriteFiles, RestoreSnapshot) are a
// separate, independently versioned format: the whole state with its
// deadlines, in msgpack, v2 with one (wall, steady) clock pair or v1 with
// wall-clock milliseconds; see snapclock.go for the conversion.
//
// Client liveness (liveness.go over package master/internal/liveness):
// every client incarnation has a ClientLivenessRecord that goes Active ->
// Suspected -> Offline on two steady-clock TTLs; Ping and successful
// mounts (and a sidecar node's registration) are the only liveness
// signals. The one ServingEligibility
// seam decides whether a client-owned resource may take new work, and
// every path that hands out a resource asks it (placement, read
// descriptors, shard placement, drain targets). An Offline incarnation is
// retired by a ClientOffboardingJob (offboard.go), completed synchronously
// or on an asynchronous executor with the same steps. The records are
// process-local: a promoted or restarted master starts every restored
// client Active with a fresh window (RestoreLiveness), and the monitor
// never counts time it did not observe (a stall) against a client.
//
// Sidecar nodes are clients too (fleet.go): the shard assignment table
// (shard, term, allocation, node, settings) is logged with the rest of the
// state, and a node is told of a change only once the log holds it. When
// a node goes Offline (or Suspected, per shard) its auto-restore shards
// move to a live node at term+1 with a new allocation.
//
// # Words
//
// A "shard" is always a sidecar shard (a fenced translog the fleet
// assigns). The object table is split into lock "stripes" (type stripe,
// Config.Shards of them, a name older than the fleet): an object lives in
// the stripe its (tenant, key) hashes to.
//
// # Where things are
//
// Start at master.go (the Master, its Options, the Journal it logs to and
// the lock order), then model.go (objects, replicas, segments, stripes).
// The master's clock (SteadyTime, Clock, clock.go) is package
// master/internal/steadytime, shared with the liveness package.
// The rest, by what it is about:
//
//   - objects and leases: put.go (PutStart, PutEnd, PutRevoke, and
//     beginChange, the start of every logged change to one object),
//     read.go (reads, Remove), evict.go (eviction and its ticker,
//     RunEviction);
//   - segments: segment.go (mount, unmount, and ReMountSegment as a driver
//     over checkRemount, collectRemount, rebuildAllocators, installHandles
//     and publishRemount); the byte ranges of one segment are package
//     master/internal/alloc;
//   - liveness and offboarding: the state machine (records, signals,
//     monitor passes, restore, the TTL configuration and its resolution)
//     is package master/internal/liveness, pure and table-tested;
//     liveness.go re-exports its names and drives it (Ping, RunLiveness
//     and CheckLiveness with their logs and metrics, RestoreLiveness),
//     eligibility.go (the one ServingEligibility seam), offboard.go
//     (offboarding jobs);
//   - the fleet: fleet.go (nodes, shard assignment, drains, moves: the
//     locks, the log records, and publication once the log holds a
//     change), rebalance.go (the master's view for PlanRebalance),
//     fleetserver.go (its RPCs), routes.go (the routing feed clients send
//     shard calls by); its pure decisions are package
//     master/internal/fleetplan: placement (Pick), what a report does to
//     a row (OnReport), what a lost node's shards do (OnSuspected,
//     OnOffline), the monitor's pass (PendingStep), a drain (DrainStep),
//     what a node is told (ForNode), the feed's diff, PlanRebalance and
//     the request checks (CheckAssign, CheckMove); shard settings are
//     checked with package internal/shardsettings, the same conversion
//     the sidecar opens shards with, so the master imports no sidecar
//     package;
//   - durability: logentry.go (an Op as a log entry: EncodeEntry,
//     DecodeEntry and the per-kind checks), replay.go (a standby's
//     RestoreStandby and ReplayStandby), snapshot.go (Freeze, WriteFiles,
//     RestoreSnapshot as a driver over decodeSegments, decodeChunks,
//     sumChunks and buildStripes), snapclock.go (the snapshot manifest and
//     clock conversion); the payloads' MessagePack is package
//     master/internal/snapcodec;
//   - serving: server.go (the object API), health.go,
//     errors.go (Error, the sentinels and their wire reasons), metrics.go
//     (declared with package master/internal/metricdef, as package ha's
//     are).
//
// Package ha runs a Master with a fenced log in the store: election,
// promotion (node.go), the Journal (journal.go), a standby following the
// log (follow.go) and checkpoints (checkpoint.go).
package master
