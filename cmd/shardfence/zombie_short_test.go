//go:build !verify

package main

import "time"

// zombiePhase is how long each phase of the zombie test appends; `make
// verify` runs them longer.
const zombiePhase = 1500 * time.Millisecond
