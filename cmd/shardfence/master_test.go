package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/internal/syncbuf"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/client"
)

// syncBuffer holds a command's output while it runs.
type syncBuffer = syncbuf.Buffer

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

// startMasterCmd runs the master subcommand in process and returns its
// URL and a function that stops it and returns its error.
func startMasterCmd(t *testing.T, args ...string) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() { done <- runMaster(ctx, append([]string{"--listen", "127.0.0.1:0"}, args...), &out, &errOut) }()
	re := regexp.MustCompile(`listening on (\S+)`)
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		cancel()
		t.Fatalf("master did not report its address; stderr: %s", errOut.String())
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { _ = stop() })
	return "http://" + addr, stop
}

// With --store the master keeps its state in the store: a restart on the
// same store resumes from the log, and `master status` reports it.
func TestMasterCommandRestartsFromTheStore(t *testing.T) {
	ctx := context.Background()
	store := "file://" + t.TempDir()
	url, stop := startMasterCmd(t, "--store", store, "--cluster", "unit", "--snapshot-interval", "0")
	c := client.New(nil, url)
	waitOK := func(f func() error) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for err := f(); err != nil; err = f() {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	seg := master.SegmentSpec{ID: 1, Size: 1 << 20, Endpoint: "e:1"}
	waitOK(func() error { return c.MountSegment(ctx, "c1", seg) })
	waitOK(func() error {
		_, err := c.PutStart(ctx, master.PutRequest{Client: "c1", Tenant: "t", Key: "k", Size: 10})
		return err
	})
	if err := c.PutEnd(ctx, "c1", "t", "k"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runMaster(ctx, []string{"snapshot", "--addr", url}, &out, &out); err != nil || !strings.Contains(out.String(), "1 objects") {
		t.Fatalf("master snapshot: %v %s", err, out.String())
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	url2, _ := startMasterCmd(t, "--store", store, "--cluster", "unit")
	c2 := client.New(nil, url2)
	waitOK(func() error {
		ok, err := c2.Exist(ctx, "t", "k")
		if err == nil && !ok {
			return errors.New("the object did not survive the restart")
		}
		return err
	})
	out.Reset()
	if err := runMaster(ctx, []string{"status", "--addr", url2}, &out, &out); err != nil || !strings.Contains(out.String(), "role primary") || !strings.Contains(out.String(), "term 2") {
		t.Fatalf("master status: %v %s", err, out.String())
	}
	if err := runMaster(ctx, []string{"promote", "--addr", url2}, &out, &out); err == nil {
		t.Fatal("a primary accepted a promotion")
	}
	// A standby holds no term until promoted, and says so.
	url3, _ := startMasterCmd(t, "--store", store, "--cluster", "unit", "--standby")
	out.Reset()
	if err := runMaster(ctx, []string{"status", "--addr", url3}, &out, &out); err != nil || !strings.Contains(out.String(), "role standby") || !strings.Contains(out.String(), "term none") {
		t.Fatalf("standby status: %v %s", err, out.String())
	}
}
