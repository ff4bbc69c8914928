package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/client"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The master subcommand serves the API until its context ends.
func TestMasterCommandServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runMaster(ctx, []string{"--listen", "127.0.0.1:0", "--lease-ttl", "3s", "--tenant-quota", "small=100"}, &out, &errOut)
	}()
	re := regexp.MustCompile(`listening on (\S+)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("master did not report its address; stderr: %s", errOut.String())
	}
	c := client.New(nil, "http://"+addr)
	if err := c.MountSegment(ctx, "c1", master.SegmentSpec{ID: 1, Size: 1 << 20, Endpoint: "e:1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutStart(ctx, master.PutRequest{Client: "c1", Tenant: "t", Key: "k", Size: 10}); err != nil {
		t.Fatal(err)
	}
	if err := c.PutEnd(ctx, "c1", "t", "k"); err != nil {
		t.Fatal(err)
	}
	if _, ttl, err := c.GetReplicaList(ctx, "t", "k"); err != nil || ttl != 3*time.Second {
		t.Fatalf("GetReplicaList: ttl %v, %v", ttl, err)
	}
	_, err := c.PutStart(ctx, master.PutRequest{Client: "c1", Tenant: "small", Key: "k", Size: 101})
	if !errors.Is(err, master.ErrQuotaExceeded) {
		t.Fatalf("put over the configured tenant quota: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("master exited with %v", err)
	}
}

func TestMasterCommandRejectsBadFlags(t *testing.T) {
	var out, errOut syncBuffer
	err := runMaster(context.Background(), []string{"--high-watermark", "3"}, &out, &errOut)
	if !errors.Is(err, errUsage) {
		t.Fatalf("bad watermark: %v", err)
	}
	if err := runMaster(context.Background(), []string{"--tenant-quota", "t=lots"}, &out, &errOut); err == nil {
		t.Fatal("a quota that is not a byte count was accepted")
	}
}
