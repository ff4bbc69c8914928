//go:build verify

package main

import "time"

const zombiePhase = 10 * time.Second
