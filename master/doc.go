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
// Client liveness (liveness.go): every client incarnation has a
// ClientLivenessRecord that goes Active -> Suspected -> Offline on two
// steady-clock TTLs; Ping and successful mounts (and a sidecar node's
// registration) are the only liveness signals. The one ServingEligibility
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
package master
