// Package ha makes the master a client of the project's own fencing
// protocol: its durable state goes through the same fenced store as any
// shard's.
//
// The operation log is a fenced translog shard, "master-<cluster>", written
// with the same fence, translog, seal and recovery code as a shard. Every
// change that must survive a failover (put end, revoke, remove, mount,
// unmount, remount, eviction, restore; pins and group and tenant
// membership travel in the object records) is appended in the standby wire
// format (master.EncodeEntry), and the master answers the request that
// caused it only once the append is acknowledged: the md of its generation
// exists and the fence CAS of the term succeeded. Records are batched while
// the previous batch is on its way (group commit), so under load one
// generation carries many changes. Lease and soft-pin deadlines and read
// renewals never enter the log.
//
// Roles. A primary holds the log's term. It opens the log with
// recovery.Open at one above every term the store names, which deletes the
// previous primary's fence key: a zombie master's next append fails (its
// CAS, or its md create against the successor's poison) and it
// acknowledges nothing more, says so in every error and in /readyz, and is
// told within a second even when idle (it lists the fence keys). The
// restore is the newest complete snapshot that restores (older ones on
// failure) plus the log after it. A hot standby reads only: it loads the
// newest snapshot, then applies each generation of the lineage as soon as
// its md exists, in order, and reports its lag. Promote claims the next
// term the same way, with the standby's position as where replay resumes,
// so only the tail it had not applied yet is read. A promoted or restarted
// master restores memory replicas unreadable: it serves as soon as it
// opened, and each segment serves again once its client remounts it (which
// grants the recovery lease).
//
// Complete snapshots are checkpoints of the log shard, published manifest
// last with create-if-absent, and only after a check that no higher term
// exists; see Node.snapshot. GC after each one removes log generations and
// snapshots below the retained ones through seal.GC, which never deletes a
// poison.
package ha
