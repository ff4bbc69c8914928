package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// asBinaryEnv makes the test binary run as the shardfence command, so the
// multi-process tests start real `shardfence serve` processes without a
// separate build.
const asBinaryEnv = "SHARDFENCE_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(asBinaryEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	code := m.Run()
	removeChild()
	os.Exit(code)
}

// The zombie scenario (sidecarproc.RunZombie) on each store: the
// filesystem and every real server the tests start (MinIO, versitygw,
// Azurite, fake-gcs-server); the e2e module runs it against MinIO in a
// container as well.
func TestZombieProcessesOnFS(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	sidecarproc.RunZombie(t, thisBinary(), "file://"+t.TempDir(), "", zombiePhase)
}

func TestZombieProcessesOnMinIO(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	sidecarproc.RunZombie(t, thisBinary(), srv.MinioURL("zombie"), srv.SecretKey, zombiePhase)
}

func TestZombieProcessesOnVersityGW(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	srv, err := testservers.StartVersityGW(t)
	if err != nil {
		testservers.Unavailable(t, "versitygw", err)
	}
	sidecarproc.RunZombie(t, thisBinary(), srv.S3URL("zombie"), srv.SecretKey, zombiePhase)
}

func TestZombieProcessesOnAzurite(t *testing.T) {
	srv := testservers.StartAzurite(t)
	srv.SetEnv(t) // the sidecars inherit the account key
	sidecarproc.RunZombie(t, thisBinary(), srv.StoreURL("zombie"), testservers.AzuriteKey, zombiePhase)
}

func TestZombieProcessesOnFakeGCS(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	srv := testservers.NewFakeGCS(t)
	sidecarproc.RunZombie(t, thisBinary(), srv.StoreURL("zombie"), "", zombiePhase)
}

// The zombie scenario with every sidecar serving create_only fencing: the
// shard is created in that mode at A's first open (the scenario checks the
// stored mode), so no sync sends a CAS and the successors' seals, poisoning
// until they win, and the writers' fence checks are the only fence.
func TestZombieProcessesCreateOnlyOnFS(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	sidecarproc.RunZombie(t, thisBinary(), "file://"+t.TempDir(), "", zombiePhase, "--fencing-mode", "create_only")
}

func TestZombieProcessesCreateOnlyOnMinIO(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	sidecarproc.RunZombie(t, thisBinary(), srv.MinioURL("zombie"), srv.SecretKey, zombiePhase, "--fencing-mode", "create_only")
}

// Three first opens of a new shard racing across processes, on the
// filesystem and on MinIO (sidecarproc.RunFirstOpenRace).
func TestFirstOpenRaceOnFS(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	sidecarproc.RunFirstOpenRace(t, thisBinary(), "file://"+t.TempDir(), 3, zombiePhase)
}

func TestFirstOpenRaceOnMinIO(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	sidecarproc.RunFirstOpenRace(t, thisBinary(), srv.MinioURL("firstopen"), 3, zombiePhase)
}
