//go:build unix

package recoverybench

import "golang.org/x/sys/unix"

// flushDirty writes back dirty pages, so the setup's writes are not paid
// for by the first measured run's fsyncs.
func flushDirty() { unix.Sync() }
