//go:build !unix

package main

// flushDirty has nothing to flush where the fs driver does not build.
func flushDirty() {}
