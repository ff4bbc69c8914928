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
// Every durable state change is an Op applied through Master.apply, which
// hands it to a Journal: that is where the fenced operation log plugs in.
package master
