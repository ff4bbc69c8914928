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
// Every durable state change (mount, unmount, remount, put start/end/revoke,
// remove, evict, restore) is described as an Op, in the standby wire model,
// and handed to the Journal inside the critical section that made it, so
// records of one key arrive in the order they were applied. Lease grants are
// never logged. A standby applies the same records with ReplayStandby. No
// durable Journal exists yet: the binary wires in none, so a restarted
// master starts empty; a fenced operation log is meant to plug in here.
//
// Client liveness plugs in through ServingEligibility, which placement
// consults; until the liveness state machine lands every client is Active.
package master
