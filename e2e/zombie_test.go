package e2e

import (
	"testing"
	"time"

	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
)

// The multi-process zombie scenario of cmd/shardfence, on MinIO in a
// container.
func TestZombieProcessesOnMinIOContainer(t *testing.T) {
	srv := startMinIO(t)
	sidecarproc.RunZombie(t, shardfence, srv.MinioURL("zombie"), srv.SecretKey, 1500*time.Millisecond)
}
