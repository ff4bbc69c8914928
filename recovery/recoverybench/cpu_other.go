//go:build !unix

package recoverybench

import "time"

// processCPU is not measured where getrusage(2) does not exist.
func processCPU() time.Duration { return 0 }
