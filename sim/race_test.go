//go:build race

package sim

// raceEnabled: under the race detector a seed runs about ten times slower,
// so the race run of ./... runs a few seeds (make sim-brief runs the rest).
const raceEnabled = true
