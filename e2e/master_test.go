package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	sfclient "github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/client"
)

// MinIO frozen (`docker pause`) under a primary master and its standby
// while a client changes the master's state: the primary cannot renew and
// goes quiet, nobody can claim while the store is frozen, and once it
// thaws exactly one master serves at a time. Every change the client saw
// acknowledged is in the master that serves at the end.
func TestMinIOPausedUnderThePrimaryMaster(t *testing.T) {
	srv := startMinIO(t)
	url := srv.MinioURL("masters")
	flags := []string{"--election-timeout", "1s", "--shards", "16", "--snapshot-interval", "0"}
	m1 := sidecarproc.StartMaster(t, shardfence, "m1", "e2e", "127.0.0.1:0", url, flags...)
	m2 := sidecarproc.StartMaster(t, shardfence, "m2", "e2e", "127.0.0.1:0", url, append([]string{"--standby"}, flags...)...)
	hc := &http.Client{Timeout: 5 * time.Second}
	masters := sfclient.NewMasters(hc, []string{"http://" + m1.Addr, "http://" + m2.Addr})

	// Split brain watch: two masters that both answer they are the
	// primary with their leadership held, at the same moment.
	watchCtx, stopWatch := context.WithCancel(t.Context())
	var split []string
	var watched int
	var wmu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		for watchCtx.Err() == nil {
			var serving []string
			for _, a := range masters.Ask(watchCtx, 500*time.Millisecond) {
				if a.Err == nil && a.Role == masterv1.MasterRole_MASTER_ROLE_PRIMARY && a.Leader.Known() && a.Leader.Node == a.Node {
					serving = append(serving, fmt.Sprintf("%s (term %d)", a.Node, a.Leader.Term))
				}
			}
			wmu.Lock()
			watched++
			if len(serving) > 1 {
				split = append(split, fmt.Sprint(serving))
			}
			wmu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	})
	defer func() { stopWatch(); wg.Wait() }()

	load := &masterLoad{masters: masters, hc: hc}
	ctx, cancel := context.WithCancel(t.Context())
	wg.Go(func() { load.run(ctx) })
	stopLoad := func() { cancel() }
	defer stopLoad()

	load.await(t, "before the pause", time.Minute, 20)
	if err := srv.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	time.Sleep(4 * time.Second) // four election timeouts
	if err := srv.Unpause(t.Context()); err != nil {
		t.Fatal(err)
	}
	thawed := time.Now()
	load.await(t, "after the store thawed", 2*time.Minute, load.count()+20)
	stopLoad()
	stopWatch()
	wg.Wait()

	load.mu.Lock()
	acked, during := load.acked, 0
	for _, a := range load.times {
		if a.After(paused.Add(200*time.Millisecond)) && a.Before(thawed) {
			during++
		}
	}
	load.mu.Unlock()
	if during > 0 {
		t.Errorf("%d changes acknowledged while the store was frozen", during)
	}
	wmu.Lock()
	if len(split) > 0 {
		t.Errorf("two masters served at once (%d of %d looks): %v", len(split), watched, split[:min(len(split), 5)])
	}
	wmu.Unlock()
	p, _, ok := masters.Find(t.Context(), 5*time.Second)
	if !ok || !p.Confirmed {
		t.Fatal("no primary after the store thawed")
	}
	c := client.New(hc, p.Addr)
	for _, k := range acked {
		ok, err := c.Exist(t.Context(), "t", k)
		if err != nil || !ok {
			t.Fatalf("acknowledged put of %s missing from the primary %s after the pause: %v %v", k, p.Leader.Node, ok, err)
		}
	}
	t.Logf("%d acknowledged puts present on %s (term %d) after MinIO was frozen %v; %d looks at both masters, never two primaries",
		len(acked), p.Leader.Node, p.Leader.Term, thawed.Sub(paused).Round(time.Millisecond), watched)
}

// masterLoad puts objects one at a time through whichever master is
// primary, remounting its segment after a failover, and remembers every
// put whose PutEnd was acknowledged.
type masterLoad struct {
	masters *sfclient.Masters
	hc      *http.Client

	mu    sync.Mutex
	acked []string
	times []time.Time
}

func (l *masterLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *masterLoad) run(ctx context.Context) {
	seg := master.SegmentSpec{ID: 1, Name: "seg", Size: 1 << 30, Endpoint: "c1:1"}
	var c *client.Client
	for i := 0; ctx.Err() == nil; i++ {
		if c == nil {
			p, _, ok := l.masters.Find(ctx, time.Second)
			if !ok || !p.Confirmed {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			c = client.New(l.hc, p.Addr)
			// A new primary holds the segment awaiting remount (or not at
			// all, before the first mount was acknowledged).
			if _, err := c.ReMountSegment(ctx, "c1", []master.SegmentSpec{seg}); errors.Is(err, master.ErrSegmentNotFound) {
				err = c.MountSegment(ctx, "c1", seg)
				if err != nil && !errors.Is(err, master.ErrSegmentExists) {
					c = nil
					continue
				}
			} else if err != nil {
				c = nil
				continue
			}
		}
		key := fmt.Sprintf("k%d", i)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := c.PutStart(cctx, master.PutRequest{Client: "c1", Tenant: "t", Key: key, Size: 4096})
		if err == nil {
			err = c.PutEnd(cctx, "c1", "t", key)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c = nil
			time.Sleep(50 * time.Millisecond)
			continue
		}
		l.mu.Lock()
		l.acked = append(l.acked, key)
		l.times = append(l.times, time.Now())
		l.mu.Unlock()
	}
}

func (l *masterLoad) await(t *testing.T, phase string, limit time.Duration, n int) {
	t.Helper()
	for deadline := time.Now().Add(limit); l.count() < n; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d puts acknowledged in %v, want %d", phase, l.count(), limit, n)
		}
	}
}
