// Package sim simulates the whole system in one process: masters (ha.Node,
// a primary and a standby), sidecars with their agents, and one client per
// shard appending through the router, over an in-process network and one
// in-memory store, on testing/synctest's simulated time, with faults drawn
// from a seed (crashes and restarts, pauses, partitions, store stalls and
// errors) and a quiet period after them.
//
// Everything is production code reached through its constructors; only the
// network (net.go: an http.RoundTripper handing each request to the target
// process's http.Handler, bodies through pipes) and the store's fault layer
// (World.storeOf) are the simulation's. The invariants (check.go) are pure
// functions of what the driver (run.go) observes every 100 ms of simulated
// time and at the end of the quiet period. NewPlan (plan.go) is a pure
// function of the seed; Shrink drops faults of a failing plan while it
// still fails.
//
// The tests (sim_test.go) run seeds (TestSimSeeds, -sim.seeds), replay one
// (TestSeed, -seed, -sim.keep, -sim.log), show that a seed gives the same
// trace twice, and that the simulation finds three bugs re-created by the
// test-only switches of internal/testhooks. docs/VERIFICATION.md,
// "Simulation of the whole system", says what is and is not simulated.
package sim
