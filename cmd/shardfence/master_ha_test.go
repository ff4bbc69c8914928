package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/internal/harness/testservers"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/client"
)

// masterProc is one `shardfence master` process.
type masterProc struct {
	*proc
	url    string
	client *client.Client
}

// startMasterProc starts `shardfence master` of cluster "ha" with the
// store URL in the environment.
func startMasterProc(t *testing.T, name, storeURL string, extra ...string) *masterProc {
	t.Helper()
	args := append([]string{"master", "--listen", "127.0.0.1:0", "--node", name, "--cluster", "ha", "--shards", "64"}, extra...)
	p := &masterProc{proc: spawn(t, "master "+name, "master listening on ", []string{masterStoreEnv + "=" + storeURL}, args...)}
	p.url = "http://" + p.addr
	// Generous: a new primary places nothing until its predecessor's
	// allocation lease ran out (3 s after its claim), and a loaded machine
	// under -race adds seconds to a batch on MinIO. Calls that must fail
	// fast against a frozen master carry their own context deadline.
	p.client = client.New(&http.Client{Timeout: 30 * time.Second}, p.url)
	return p
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// readyz returns the status code of /readyz (0 when unreachable).
func (p *masterProc) readyz() int {
	res, err := (&http.Client{Timeout: time.Second}).Get(p.url + "/readyz")
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

func (p *masterProc) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for p.readyz() != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready\n%s", p.name, tail(p.stderr.String(), 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keyState is what the clients were told about a key.
type keyState uint8

const (
	acked     keyState = iota + 1 // PutEnd acknowledged: must be present
	removed                       // Remove acknowledged: must be absent
	ambiguous                     // the last change failed: either is allowed
)

type ledger struct {
	mu   sync.Mutex
	keys map[string]keyState
}

func (l *ledger) set(k string, s keyState) {
	l.mu.Lock()
	l.keys[k] = s
	l.mu.Unlock()
}

// TestMasterFailoverMultiProcess runs masters as separate processes on
// MinIO under client load: the primary is SIGKILLed in the middle of a
// complete snapshot and its standby promoted; a new standby is started,
// the promoted master is frozen with SIGSTOP, the new standby promoted,
// and the frozen one resumed with SIGCONT. Every change a client saw
// acknowledged is in the last master; the resumed one acknowledges
// nothing, and says so in its errors and /readyz.
func TestMasterFailoverMultiProcess(t *testing.T) {
	t.Parallel() // its own processes, ports and directories
	if testing.Short() {
		t.Skip("starts MinIO and three master processes")
	}
	srv, err := testservers.StartMinIO(t)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	storeURL := srv.MinioURL("masters")
	ctx := context.Background()
	// Promotions by hand only (elections off): TestMasterElectionMultiProcess
	// covers the elected ones, and an election racing these promotes would
	// make the terms this test expects a matter of timing.
	common := []string{"--snapshot-interval", "100ms", "--fence-check-interval", "200ms", "--retain-gens", "50", "--data-dir", t.TempDir(), "--election-timeout", "0"}
	a := startMasterProc(t, "a", storeURL, common...)
	a.waitReady(t)
	seg := master.SegmentSpec{ID: 1, Name: "seg", Size: 1 << 40, Endpoint: "c1:1"}
	if err := a.client.MountSegment(ctx, "c1", seg); err != nil {
		t.Fatal(err)
	}
	// Client c1 pings whichever master the test points it at, as a live
	// client does: without its pings it would go suspected after the
	// active TTL and lose its segment after the suspicion TTL.
	var target atomic.Pointer[client.Client]
	target.Store(a.client)
	stopPing := make(chan struct{})
	defer close(stopPing)
	go func() {
		for {
			select {
			case <-stopPing:
				return
			case <-time.After(500 * time.Millisecond):
			}
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			_, _ = target.Load().Ping(pctx, "c1")
			cancel()
		}
	}()
	led := &ledger{keys: map[string]keyState{}}
	// A state large enough that a snapshot takes a while to upload.
	const prefill = 60_000
	for lo := 0; lo < prefill; lo += 1000 {
		var reqs []master.PutRequest
		var refs []master.ObjectRef
		for i := lo; i < lo+1000; i++ {
			k := fmt.Sprintf("pre-%d", i)
			reqs = append(reqs, master.PutRequest{Client: "c1", Tenant: "t", Key: k, Size: 4096})
			refs = append(refs, master.ObjectRef{Client: "c1", Tenant: "t", Key: k})
		}
		if _, err := a.client.BatchPutStart(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		errs, err := a.client.BatchPutEnd(ctx, refs)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			if e != nil {
				t.Fatalf("prefill %s: %v", refs[i].Key, e)
			}
			led.set(refs[i].Key, acked)
		}
	}
	b := startMasterProc(t, "b", storeURL, append(common, "--standby")...)
	b.waitReady(t)

	// Client load against whichever master the test points it at.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var acks atomic.Int64
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var mine []string
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c := target.Load()
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				if len(mine) > 0 && rng.IntN(5) == 0 {
					k := mine[rng.IntN(len(mine))]
					led.set(k, ambiguous)
					if err := c.Remove(cctx, "t", k, true); err == nil {
						led.set(k, removed)
						acks.Add(1)
					}
				} else {
					k := fmt.Sprintf("w%d-%d", w, i)
					led.set(k, ambiguous)
					if _, err := c.PutStart(cctx, master.PutRequest{Client: "c1", Tenant: "t", Key: k, Size: 4096}); err == nil {
						if err := c.PutEnd(cctx, "c1", "t", k); err == nil {
							led.set(k, acked)
							acks.Add(1)
							mine = append(mine, k)
						}
					} else {
						time.Sleep(5 * time.Millisecond) // no primary: back off a little
					}
				}
				cancel()
			}
		})
	}
	waitAcks := func(n int64) {
		t.Helper()
		want := acks.Load() + n
		deadline := time.Now().Add(60 * time.Second)
		for acks.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("clients got no acknowledgements (%d)", acks.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitAcks(200)

	// SIGKILL a while a snapshot is on its way: files uploaded, manifest
	// not created yet.
	root, err := blobstore.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	shard, _ := blobstore.Sub(root, "master-ha")
	midSnapshot := func() bool {
		files, err1 := blobstore.ListAll(ctx, shard, layout.FilesDir)
		mans, err2 := blobstore.ListAll(ctx, shard, layout.ManifestPrefix)
		if err1 != nil || err2 != nil {
			return false
		}
		published := map[string]bool{}
		for _, m := range mans {
			if p, ok := layout.ParseManifestKey(m.Key); ok {
				published[layout.FilePrefix(p.Term, p.Gen)] = true
			}
		}
		for _, f := range files {
			i := strings.LastIndexByte(f.Key, '/')
			if !published[f.Key[:i+1]] {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(60 * time.Second)
	for !midSnapshot() {
		if time.Now().After(deadline) {
			t.Fatal("never caught a snapshot in progress")
		}
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	if !midSnapshot() {
		t.Log("the snapshot's manifest landed just before the kill")
	}

	// Promote the standby.
	var out bytes.Buffer
	if err := runMaster(ctx, []string{"promote", "--addr", b.url}, &out, &out); err != nil {
		t.Fatalf("promote b: %v (%s)\n%s", err, out.String(), tail(b.stderr.String(), 30))
	}
	if !strings.Contains(out.String(), "promoted: term 2") {
		t.Fatalf("promote output %q", out.String())
	}
	b.waitReady(t)
	if _, err := b.client.ReMountSegment(ctx, "c1", []master.SegmentSpec{seg}); err != nil {
		t.Fatal(err)
	}
	target.Store(b.client)
	waitAcks(100)

	// A new standby; freeze b, promote c, resume b.
	c := startMasterProc(t, "c", storeURL, append(common, "--standby")...)
	c.waitReady(t)
	if err := b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runMaster(ctx, []string{"promote", "--addr", c.url}, &out, &out); err != nil {
		t.Fatalf("promote c: %v (%s)", err, out.String())
	}
	// b was writing until it froze: its leadership lease may still run,
	// and c answers once it has (up to the election timeout).
	c.waitReady(t)
	if _, err := c.client.ReMountSegment(ctx, "c1", []master.SegmentSpec{seg}); err != nil {
		t.Fatal(err)
	}
	target.Store(c.client)
	if err := b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The resumed master acknowledges nothing, and says why.
	for i := range 20 {
		k := fmt.Sprintf("zombie-%d", i)
		if _, err := b.client.PutStart(ctx, master.PutRequest{Client: "c1", Tenant: "t", Key: k, Size: 4096}); err == nil {
			if err := b.client.PutEnd(ctx, "c1", "t", k); err == nil {
				t.Fatalf("the resumed old master acknowledged PutEnd of %s", k)
			} else if !errors.Is(err, master.ErrFenced) && !errors.Is(err, master.ErrNotPrimary) {
				t.Fatalf("zombie PutEnd error %v does not say it is fenced", err)
			}
		}
		if err := b.client.Remove(ctx, "t", fmt.Sprintf("pre-%d", i), true); err == nil {
			t.Fatal("the resumed old master acknowledged a Remove")
		}
	}
	deadline = time.Now().Add(30 * time.Second)
	for b.readyz() != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatalf("the fenced master's /readyz still answers %d", b.readyz())
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitAcks(100)
	close(stop)
	wg.Wait()

	// Every acknowledged change is in c.
	led.mu.Lock()
	defer led.mu.Unlock()
	var present, gone, maybe int
	for k, s := range led.keys {
		if strings.HasPrefix(k, "pre-") && rand.IntN(20) != 0 {
			if s == acked {
				present++
			}
			continue // a sample of the prefill is checked one by one
		}
		ok, err := c.client.Exist(ctx, "t", k)
		if err != nil {
			t.Fatalf("exist %s: %v", k, err)
		}
		switch s {
		case acked:
			present++
			if !ok {
				t.Fatalf("acknowledged put %s is missing after the failovers", k)
			}
		case removed:
			gone++
			if ok {
				t.Fatalf("acknowledged remove of %s came back", k)
			}
		default:
			maybe++
		}
	}
	st, err := c.client.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetObjects() < uint64(present) || st.GetObjects() > uint64(present+maybe) {
		t.Fatalf("c holds %d objects; %d were acknowledged present, %d ambiguous", st.GetObjects(), present, maybe)
	}
	t.Logf("after two failovers: %d acknowledged objects present, %d acknowledged removals absent, %d ambiguous; c holds %d",
		present, gone, maybe, st.GetObjects())
}
