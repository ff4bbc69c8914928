package recovery_test

import (
	"testing"
)

// extraBackend adds a real S3 server to the scenario table when one can
// start.
func extraBackend(t *testing.T) *backend { return nil }
