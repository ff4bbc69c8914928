// Package testhooks holds the test-only switches that re-create known
// bugs or wrong designs, so the tools that must find them can show they
// do: global switches for the whole-system simulation (package sim, this
// file) and per-context switches for the protocol checker (package
// verify, context.go). Production code never sets one, and each is off
// unless a test turns it on. Each names the code it changes and the fix
// or finding it re-creates.
package testhooks

import "sync/atomic"

var (
	// ForgetReportsOnNewMaster makes the sidecar's agent keep the reports
	// it sent to the previous master when it registers with a new one, so
	// it never reports its open shards again: the new master shows them
	// "assigned" for ever (fixed in e0ab631, agent.session1).
	ForgetReportsOnNewMaster atomic.Bool
	// NoBackoffReset makes the agent's reconnect back-off grow on every
	// failed or ended session and never reset after a registration, as
	// before e0ab631 (agent.Run): with 1 s + 1 s TTLs a master failover
	// leaves the nodes unregistered past the TTLs and moves their shards.
	NoBackoffReset atomic.Bool
	// PublishBeforeDurable makes the master tell the nodes of an
	// assignment as soon as it is recorded, before the operation log
	// acknowledged it (master fleet.publish): a node acts on a change a
	// master failover can lose.
	PublishBeforeDurable atomic.Bool
)
