// Package verify checks the fencing protocol by running the real fence,
// translog, seal and recovery code against a store whose every request is a
// step chosen by a scheduler.
//
// Each actor (a primary, a claimant, a relocation target) is a goroutine
// running production code over its own view of one Store. A request blocks
// inside the store until the scheduler picks it and decides its outcome:
// delivered, applied with its response lost, refused before taking effect
// (unavailable, or S3's 409 conflict), a delete acknowledged but not applied,
// or held back to land at any later step (or never). Between steps the
// scheduler waits until every goroutine of the run is durably blocked
// (testing/synctest), so a schedule is a plain sequence of choices and
// replaying it reproduces the run exactly.
//
// Explore walks the choices depth-first, replaying each prefix from the
// start and pruning states already seen (the store's contents, the requests
// in flight, and what every actor has heard); Walk follows seeded random
// choices. Both check a scenario's invariants after every step and print a
// violating schedule as a readable trace with the path that replays it.
package verify
