package main

import (
	"testing"

	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// The rollout of fencing on a live shard across processes
// (sidecarproc.RunModeRollout): unfenced -> observe -> per_sync ->
// create_only, each step a `shardfence settings` rewrite at its own term
// followed by a new open, clients appending all along; every acknowledged
// op ends up in the lineage once.
func TestModeRolloutAcrossProcessesOnFS(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	if testing.Short() {
		t.Skip("starts sidecar processes")
	}
	sidecarproc.RunModeRollout(t, thisBinary(), "file://"+t.TempDir(), "")
}

func TestModeRolloutAcrossProcessesOnMinIO(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	if testing.Short() {
		t.Skip("starts sidecar processes")
	}
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	sidecarproc.RunModeRollout(t, thisBinary(), srv.MinioURL("rollout"), srv.SecretKey)
}
