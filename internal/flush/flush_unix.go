//go:build unix

// Package flush writes back the machine's dirty pages, so a benchmark's
// setup writes are not paid for by its first measured runs.
package flush

import "golang.org/x/sys/unix"

// Dirty writes back every dirty page (sync(2)).
func Dirty() { unix.Sync() }
