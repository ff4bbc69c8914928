//go:build race

package verify

// raceEnabled: the race detector slows every step about eightfold, so the
// bounded searches stop earlier under make test.
const raceEnabled = true
