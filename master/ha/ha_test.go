package ha

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/blobstore/mem"
	_ "github.com/shardfence/shardfence/blobstore/minio"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/harness/testservers"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

var fastRetry = fence.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond, Attempts: 10}

// runBackends runs f against a mem store, an fs store and a real MinIO
// server (started once for the whole test, on 127.0.0.1; under CI=true a
// MinIO that does not start fails the test).
func runBackends(t *testing.T, f func(t *testing.T, store *blobstore.Container)) {
	parent := t
	var srv *testservers.S3Server
	var srvErr error
	started := false
	for i, b := range []string{"mem", "fs", "minio"} {
		t.Run(b, func(t *testing.T) {
			var store *blobstore.Container
			switch b {
			case "mem":
				store = mem.New()
			case "fs":
				c, err := fs.Open(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				store = c
			case "minio":
				if testing.Short() {
					t.Skip("starts a MinIO server")
				}
				if !started {
					srv, srvErr = testservers.StartMinIO(parent)
					started = true
				}
				if srvErr != nil {
					testservers.Unavailable(t, "MinIO", srvErr)
				}
				c, err := blobstore.Open(context.Background(), srv.MinioURL(fmt.Sprintf("ha-%d", i)))
				if err != nil {
					t.Fatalf("open MinIO: %v", err)
				}
				t.Cleanup(func() { _ = c.Close() })
				store = c
			}
			f(t, store)
		})
	}
}

type node struct {
	*Node
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error
}

func (n *node) stop(t *testing.T) {
	t.Helper()
	n.cancel()
	select {
	case <-n.done:
		if n.err != nil {
			t.Errorf("node stopped with %v", n.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("node did not stop")
	}
}

func start(t *testing.T, store *blobstore.Container, standby bool, tweak ...func(*Options)) *node {
	t.Helper()
	name := "test-p"
	if standby {
		name = "test-s"
	}
	o := Options{
		Store: store, Cluster: "c1", Standby: standby, Node: name, Advertise: "http://" + name, Backoff: fastRetry,
		Config: master.Config{Shards: 16}, Dir: t.TempDir(), PollInterval: 10 * time.Millisecond,
		FenceCheckInterval: 50 * time.Millisecond, Retain: seal.GCPolicy{RetainCheckpoints: 2},
		AllocationLease: 200 * time.Millisecond, AllocationLeaseMargin: 50 * time.Millisecond,
		Writer: translog.Options{Backoff: fastRetry},
	}
	for _, f := range tweak {
		f(&o)
	}
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	nd := &node{Node: n, cancel: cancel, done: make(chan struct{})}
	go func() {
		nd.err = n.Run(ctx)
		close(nd.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-nd.done:
		case <-time.After(30 * time.Second):
			t.Error("node did not stop")
		}
	})
	return nd
}

// waitFor polls cond for up to 60 seconds (a loaded machine is slow, a
// broken one never gets there).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func primary(t *testing.T, n *node) *master.Master {
	t.Helper()
	var m *master.Master
	waitFor(t, "the primary to open", func() bool {
		var err error
		m, err = n.Serving()
		if n.Status().Role == RoleFailed {
			t.Fatalf("node failed: %v", n.Status().Err)
		}
		return err == nil
	})
	return m
}

func mountSeg(t *testing.T, m *master.Master, id uint64) {
	t.Helper()
	if err := m.MountSegment(context.Background(), "c1", master.SegmentSpec{ID: id, Name: "seg", Size: 1 << 30, Endpoint: "c1:1"}); err != nil {
		t.Fatal(err)
	}
}

func putObj(t *testing.T, m *master.Master, key string, o master.PutOptions) {
	t.Helper()
	ctx := context.Background()
	if _, err := m.PutStart(ctx, master.PutRequest{Client: "c1", Tenant: "t", Key: key, Size: 4096, PutOptions: o}); err != nil {
		t.Fatal(err)
	}
	if err := m.PutEnd(ctx, "c1", "t", key); err != nil {
		t.Fatal(err)
	}
}

// remountAll remounts segment ids of client c1 and returns what matched.
func remountAll(t *testing.T, m *master.Master, ids ...uint64) master.RemountResult {
	t.Helper()
	var specs []master.SegmentSpec
	for _, id := range ids {
		specs = append(specs, master.SegmentSpec{ID: id, Name: "seg", Size: 1 << 30, Endpoint: "c1:2"})
	}
	res, err := m.ReMountSegment(context.Background(), "c1", specs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func readable(m *master.Master, key string) error {
	_, err := m.GetReplicaList(context.Background(), "t", key)
	return err
}
