//go:build !unix

// Package flush writes back the machine's dirty pages, so a benchmark's
// setup writes are not paid for by its first measured runs.
package flush

// Dirty has nothing to write back where sync(2) does not exist.
func Dirty() {}
