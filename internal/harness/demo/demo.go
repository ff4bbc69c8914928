// Package demo is a guided failover on loopback (`shardfence demo`): three
// sidecars over one store; term 2 fences a live term 1, a handoff moves
// term 2 on, and every acknowledged op is read back from the last owner.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/internal/sidecarapi"
	"github.com/shardfence/shardfence/sidecar"
)

// Config is one demo run.
type Config struct {
	// Store holds the demo's shard; Where names it in the output.
	Store *blobstore.Container
	Where string
	// Phase is how long each phase appends; Clients the appending clients
	// per sidecar.
	Phase   time.Duration
	Clients int
}

// sidecarProc is one sidecar of the demo, served over HTTP on loopback.
type sidecarProc struct {
	name   string
	srv    *sidecar.Server
	hs     *http.Server
	client sidecarv1connect.SidecarServiceClient
}

func startSidecar(ctx context.Context, name string, store *blobstore.Container) (*sidecarProc, error) {
	srv, err := sidecar.New(ctx, store, sidecar.Options{Node: name, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: srv.Handler(sidecar.HandlerOptions{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return &sidecarProc{name: name, srv: srv, hs: hs,
		client: sidecarv1connect.NewSidecarServiceClient(http.DefaultClient, "http://"+ln.Addr().String())}, nil
}

func (d *sidecarProc) stop() {
	_ = d.srv.Shutdown(context.Background())
	_ = d.hs.Close()
}

// Timeline prints events with the time since the demo started.
type Timeline struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

// NewTimeline starts a timeline printing to w.
func NewTimeline(w io.Writer) *Timeline { return &Timeline{w: w, start: time.Now()} }

// Say prints one event.
func (t *Timeline) Say(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "[%6.2fs] %s\n", time.Since(t.start).Seconds(), fmt.Sprintf(format, args...))
}

// OpenShard opens shard on a sidecar through the API at term for alloc,
// reading the open stream to its end: the opened event and how many ops
// were replayed.
func OpenShard(ctx context.Context, c sidecarv1connect.SidecarServiceClient, shard string, term int64, alloc string) (*sidecarv1.Opened, int, error) {
	return sidecarapi.OpenShard(ctx, c, shard, term, alloc)
}

// writer appends unique ops to one sidecar from several clients until
// stopped or fenced, and remembers every op acknowledged.
type writer struct {
	name     string
	acked    sync.Map
	ackedN   atomic.Int64
	fenced   atomic.Int64 // successor term seen, 0 if none
	moved    atomic.Bool  // told the shard was handed off
	lastAck  atomic.Int64 // unix nanos of the last ack
	firstErr atomic.Value
}

func (w *writer) run(ctx context.Context, c sidecarv1connect.SidecarServiceClient, shard string, clients int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for g := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				op := fmt.Sprintf("%s-%d-%d", w.name, g, i)
				_, err := c.Append(ctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: shard, Ops: [][]byte{[]byte(op)}}))
				if err != nil {
					w.refused(err)
					return
				}
				w.acked.Store(op, true)
				w.ackedN.Add(1)
				w.lastAck.Store(time.Now().UnixNano())
			}
		})
	}
	return &wg
}

// refused records why an append was refused: fenced (with the successor
// term), moved, or the first other error.
func (w *writer) refused(err error) {
	switch d := sidecarapi.ErrorDetail(err); d.GetReason() {
	case "fenced":
		w.fenced.Store(max(d.GetSuccessorTerm(), 1))
	case "handed_off", "handing_off":
		w.moved.Store(true)
	default:
		w.firstErr.CompareAndSwap(nil, err)
	}
}

// demo is one run: the store, the sidecars and the writers of each phase.
type demo struct {
	cfg     Config
	tl      *Timeline
	a, b, c *sidecarProc
	wa, wb  *writer
	wc      *writer
}

// shard is the demo's shard.
const shard = "demo"

// Run runs the demo and narrates it to out. It fails if any acknowledged
// op is missing from the lineage at the end.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	d := &demo{cfg: cfg, tl: &Timeline{w: out, start: time.Now()}}
	defer d.stop()
	for _, phase := range []func(context.Context) error{d.termOne, d.fence, d.handOff, d.lastPhase, d.verify} {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	return nil
}

// stop stops the sidecars started.
func (d *demo) stop() {
	for _, p := range []*sidecarProc{d.c, d.b, d.a} {
		if p != nil {
			p.stop()
		}
	}
}

// termOne starts A and B, opens the shard on A at term 1, and lets A's
// clients append for a phase.
func (d *demo) termOne(ctx context.Context) (err error) {
	d.tl.Say("store %s; starting sidecars A and B on loopback", d.cfg.Where)
	if d.a, err = startSidecar(ctx, "A", d.cfg.Store); err != nil {
		return err
	}
	if d.b, err = startSidecar(ctx, "B", d.cfg.Store); err != nil {
		return err
	}
	if _, _, err := OpenShard(ctx, d.a.client, shard, 1, "alloc-a"); err != nil {
		return fmt.Errorf("open term 1 on A: %w", err)
	}
	d.tl.Say("A opened shard %q at term 1 (a new shard: empty restore point)", shard)
	return nil
}

// fence opens term 2 on B while A's clients append: A must be fenced, and
// its clients told so, within 30 s.
func (d *demo) fence(ctx context.Context) error {
	d.wa = &writer{name: "a"}
	stopA := make(chan struct{})
	wgA := d.wa.run(ctx, d.a.client, shard, d.cfg.Clients, stopA)
	d.tl.Say("A: %d clients appending", d.cfg.Clients)
	if err := Sleep(ctx, d.cfg.Phase); err != nil {
		return err
	}
	d.tl.Say("A acknowledged %d ops so far; opening term 2 on B while A keeps appending", d.wa.ackedN.Load())
	claimAt := time.Now()
	opened, replayed, err := OpenShard(ctx, d.b.client, shard, 2, "alloc-b")
	if err != nil {
		close(stopA)
		wgA.Wait()
		return fmt.Errorf("open term 2 on B: %w", err)
	}
	rp := opened.GetRestorePoint()
	d.tl.Say("B opened term 2 in %v: restore point term %d gen %d, %d ops replayed", time.Since(claimAt).Round(time.Millisecond), rp.GetTerm(), rp.GetGen(), replayed)
	done := make(chan struct{})
	go func() { wgA.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		close(stopA)
		<-done
		return errors.New("sidecar A was not fenced within 30s of the open on B")
	}
	if e := d.wa.firstErr.Load(); e != nil {
		return fmt.Errorf("the clients of sidecar A failed with something other than fencing: %v", e)
	}
	d.tl.Say("A fenced: its clients were told \"primary fenced, successor term %d\"; A acknowledged %d ops in all", d.wa.fenced.Load(), d.wa.ackedN.Load())
	if last := time.Unix(0, d.wa.lastAck.Load()); !last.IsZero() {
		d.tl.Say("A's last acknowledgement reached its client at %+v relative to the start of B's open", last.Sub(claimAt).Round(time.Millisecond))
	}
	return nil
}

// handOff lets B's clients append for a phase, then starts C and hands the
// shard off B -> C (same term, no seal) while they append.
func (d *demo) handOff(ctx context.Context) (err error) {
	d.wb = &writer{name: "b"}
	stopB := make(chan struct{})
	wgB := d.wb.run(ctx, d.b.client, shard, d.cfg.Clients, stopB)
	stopClients := func() {
		close(stopB)
		wgB.Wait()
	}
	if err := Sleep(ctx, d.cfg.Phase); err != nil {
		return err
	}
	d.tl.Say("B acknowledged %d ops at term 2; starting sidecar C and handing the shard off B -> C (same term, no seal) while B's clients append", d.wb.ackedN.Load())
	if d.c, err = startSidecar(ctx, "C", d.cfg.Store); err != nil {
		stopClients()
		return err
	}
	hoAt := time.Now()
	hc, err := d.b.client.StartHandoff(ctx, connect.NewRequest(&sidecarv1.StartHandoffRequest{Shard: shard, TargetAllocationId: "alloc-c", TargetNode: "C"}))
	if err != nil {
		stopClients()
		return fmt.Errorf("handoff on B: %w", err)
	}
	ad, err := d.c.client.AdoptHandoff(ctx, connect.NewRequest(&sidecarv1.AdoptHandoffRequest{HandoffContext: hc.Msg.GetHandoffContext()}))
	stopClients()
	if err != nil {
		return fmt.Errorf("adopt on C: %w", err)
	}
	if e := d.wb.firstErr.Load(); e != nil {
		return fmt.Errorf("the clients of sidecar B failed: %v", e)
	}
	d.tl.Say("C adopted term %d at seq %d in %v; B's clients were told the shard moved (%v); B acknowledged %d ops in all",
		ad.Msg.GetStatus().GetTerm(), ad.Msg.GetStatus().GetNextSeqNo(), time.Since(hoAt).Round(time.Millisecond), d.wb.moved.Load(), d.wb.ackedN.Load())
	return nil
}

// lastPhase lets C's clients append for a phase.
func (d *demo) lastPhase(ctx context.Context) error {
	d.wc = &writer{name: "c"}
	stopC := make(chan struct{})
	wgC := d.wc.run(ctx, d.c.client, shard, d.cfg.Clients, stopC)
	if err := Sleep(ctx, d.cfg.Phase); err != nil {
		return err
	}
	close(stopC)
	wgC.Wait()
	if e := d.wc.firstErr.Load(); e != nil {
		return fmt.Errorf("the clients of sidecar C failed: %v", e)
	}
	d.tl.Say("C acknowledged %d ops at term 2", d.wc.ackedN.Load())
	return nil
}

// verify reads C's lineage: every acknowledged op of every sidecar must be
// in it.
func (d *demo) verify(ctx context.Context) error {
	st, err := d.c.client.Read(ctx, connect.NewRequest(&sidecarv1.ReadRequest{Shard: shard}))
	if err != nil {
		return fmt.Errorf("read on C: %w", err)
	}
	read := map[string]bool{}
	for st.Receive() {
		for _, op := range st.Msg().GetBatch().GetOps() {
			read[string(op)] = true
		}
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("read on C: %w", err)
	}
	writers := []*writer{d.wa, d.wb, d.wc}
	lost := missing(read, writers)
	total := d.wa.ackedN.Load() + d.wb.ackedN.Load() + d.wc.ackedN.Load()
	d.tl.Say("C's lineage holds %d ops; acknowledged %d (A %d + B %d + C %d); lost %d", len(read), total, d.wa.ackedN.Load(), d.wb.ackedN.Load(), d.wc.ackedN.Load(), lost)
	if lost > 0 {
		return fmt.Errorf("%d acknowledged ops are missing from the lineage", lost)
	}
	d.tl.Say("ok: every acknowledged op is readable (ops in flight when A was fenced or B handed off were never acknowledged; a client retries them on the new primary)")
	return nil
}

// missing counts the ops the writers had acknowledged that read lacks.
func missing(read map[string]bool, writers []*writer) int {
	lost := 0
	for _, w := range writers {
		w.acked.Range(func(k, _ any) bool {
			if !read[k.(string)] {
				lost++
			}
			return true
		})
	}
	return lost
}

// Sleep waits d, or until ctx ends (returning its error).
func Sleep(ctx context.Context, d time.Duration) error { return clock.Sleep(ctx, clock.System(), d) }
