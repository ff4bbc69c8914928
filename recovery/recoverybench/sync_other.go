//go:build !unix

package recoverybench

// flushDirty has nothing to flush where the fs driver does not build.
func flushDirty() {}
