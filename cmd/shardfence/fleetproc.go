package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/api/sidecar/v1/sidecarv1connect"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/harness/demo"
	"github.com/shardfence/shardfence/internal/launcher"
)

// A fleet of real processes: one master and sidecars registered with it,
// each a `shardfence` process, so a node can die by SIGKILL or freeze by
// SIGSTOP. `demo --auto`, `bench failover` and the multi-process failover
// tests run it.

// storeOrTemp returns url, or when it is empty a file:// store in a new
// temporary directory that cleanup removes.
func storeOrTemp(url, prefix string) (string, func(), error) {
	if url != "" {
		return url, func() {}, nil
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return "file://" + dir, func() { _ = os.RemoveAll(dir) }, nil
}

// fleetCmd is how to run the shardfence command.
type fleetCmd = launcher.Command

// selfCmd runs this binary.
func selfCmd() (fleetCmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return fleetCmd{}, fmt.Errorf("find this program: %w", err)
	}
	return fleetCmd{Path: exe}, nil
}

// fleetProc is one process of the fleet: a launcher.Proc (Label, Log,
// Pause, Kill, ...); addr, kill and signal are the launcher's Addr, Kill
// and Signal, named as the fleet's callers use them.
type fleetProc struct {
	*launcher.Proc
	addr string
}

// fleetStartTimeout is how long a fleet process may take to report its
// address.
const fleetStartTimeout = 90 * time.Second

// startFleetProc starts `shardfence args...` with env added and waits for
// the line that starts with prefix (the rest is the address).
func startFleetProc(c fleetCmd, name, prefix string, env []string, args ...string) (*fleetProc, error) {
	p, err := launcher.Start(c, launcher.Spec{Label: name, Args: args, Env: env, Ready: prefix, Timeout: fleetStartTimeout})
	if err != nil {
		return nil, err
	}
	return &fleetProc{Proc: p, addr: p.Addr}, nil
}

// kill SIGKILLs the process (resumed first if stopped) and waits for it.
func (p *fleetProc) kill() { p.Kill() }

func (p *fleetProc) signal(sig os.Signal) error { return p.Signal(sig) }

// procFleet is a master (and its standbys) and their sidecars.
type procFleet struct {
	cmd       fleetCmd
	shardURL  string // the sidecars' store
	masterURL string // the master's store
	// masterStores gives a master its own store URL (the same store
	// reached another way, as through a proxy), by name.
	masterStores map[string]string
	// sidecarStores gives a sidecar its own store URL, and sidecarMasters
	// its own --master list (the masters reached another way, as through
	// a proxy), by name.
	sidecarStores  map[string]string
	sidecarMasters map[string]string
	// sidecarArgs are flags every sidecar start gets, restarts included.
	sidecarArgs []string
	cluster     string     // the master's cluster name (default "fleet")
	master      *fleetProc // the first master started
	base        string     // its API URL
	http        *http.Client

	mu       sync.Mutex
	sidecars map[string]*fleetProc
	masters  map[string]*fleetProc // every master by name, the first included
	bases    []string              // every master's API URL, in start order
	finder   *client.Masters
}

func newProcFleet(c fleetCmd, shardURL, masterURL string) *procFleet {
	hc := &http.Client{Timeout: 10 * time.Second}
	return &procFleet{cmd: c, shardURL: shardURL, masterURL: masterURL, sidecars: map[string]*fleetProc{}, masters: map[string]*fleetProc{}, http: hc}
}

// startMaster runs the master m1 of cluster "fleet" with extra flags.
func (f *procFleet) startMaster(extra ...string) error {
	_, err := f.startMasterNamed("m1", extra...)
	return err
}

// startMasterNamed runs master name of cluster "fleet" with extra flags
// (--standby among them for a standby). A name started before is started
// again at the same address, so the sidecars' --master lists stay true.
func (f *procFleet) startMasterNamed(name string, extra ...string) (*fleetProc, error) {
	cluster := f.cluster
	if cluster == "" {
		cluster = "fleet"
	}
	listen := "127.0.0.1:0"
	f.mu.Lock()
	old := f.masters[name]
	f.mu.Unlock()
	if old != nil {
		listen = old.addr
	}
	args := append([]string{"master", "--listen", listen, "--cluster", cluster, "--node", name, "--shards", "16", "--snapshot-interval", "0"}, extra...)
	store := f.masterURL
	if u, ok := f.masterStores[name]; ok {
		store = u
	}
	p, err := startFleetProc(f.cmd, "master "+name, "master listening on ", []string{masterStoreEnv + "=" + store}, args...)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.masters[name] = p
	if old == nil {
		f.bases = append(f.bases, "http://"+p.addr)
		f.finder = client.NewMasters(f.http, f.bases)
	}
	if f.master == nil || f.master.Label == p.Label {
		f.master, f.base = p, "http://"+p.addr
	}
	return p, nil
}

// masterProc returns the master process called name.
func (f *procFleet) masterProc(name string) *fleetProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.masters[name]
}

// masterList is the --master value for sidecars: every master's URL.
func (f *procFleet) masterList() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.bases, ",")
}

// fleetClient returns a client of the primary master: the one the
// masters name (the first master when only one runs).
func (f *procFleet) fleetClient(ctx context.Context) (masterv1connect.MasterFleetServiceClient, error) {
	f.mu.Lock()
	finder, base, n := f.finder, f.base, len(f.bases)
	f.mu.Unlock()
	if n > 1 {
		p, _, ok := finder.Find(ctx, 2*time.Second)
		if !ok {
			return nil, fmt.Errorf("no master is primary or knows the primary")
		}
		base = p.Addr
	}
	return masterv1connect.NewMasterFleetServiceClient(f.http, base), nil
}

// startSidecar runs `serve --master` named name.
func (f *procFleet) startSidecar(name string, extra ...string) (*fleetProc, error) {
	masters, store := f.masterList(), f.shardURL
	if u, ok := f.sidecarMasters[name]; ok {
		masters = u
	}
	if u, ok := f.sidecarStores[name]; ok {
		store = u
	}
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--node", name, "--master", masters, "--log-level", "info"}, f.sidecarArgs...)
	args = append(args, extra...)
	p, err := startFleetProc(f.cmd, "sidecar "+name, "sidecar listening on ", []string{envPrefix + "STORE=" + store}, args...)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.sidecars[name] = p
	f.mu.Unlock()
	return p, nil
}

func (f *procFleet) sidecar(name string) *fleetProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sidecars[name]
}

// stop kills every process: the sidecars, then the masters.
func (f *procFleet) stop() {
	for _, set := range []map[string]*fleetProc{f.sidecars, f.masters} {
		f.mu.Lock()
		procs := slices.Collect(maps.Values(set))
		f.mu.Unlock()
		for _, p := range procs {
			p.kill()
		}
	}
}

// nodes lists the master's nodes.
func (f *procFleet) nodes(ctx context.Context) ([]*masterv1.NodeInfo, error) {
	fc, err := f.fleetClient(ctx)
	if err != nil {
		return nil, err
	}
	res, err := fc.ListNodes(ctx, connect.NewRequest(&masterv1.ListNodesRequest{}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetNodes(), nil
}

// shards lists the master's shard table.
func (f *procFleet) shards(ctx context.Context) (map[string]*masterv1.ShardInfo, error) {
	fc, err := f.fleetClient(ctx)
	if err != nil {
		return nil, err
	}
	res, err := fc.ListShards(ctx, connect.NewRequest(&masterv1.ListShardsRequest{}))
	if err != nil {
		return nil, err
	}
	out := map[string]*masterv1.ShardInfo{}
	for _, s := range res.Msg.GetShards() {
		out[s.GetAssignment().GetShard()] = s
	}
	return out, nil
}

// waitNodes waits until n nodes are active.
func (f *procFleet) waitNodes(ctx context.Context, n int) error {
	return pollUntil(ctx, "the sidecars to register", func() (bool, error) {
		nodes, err := f.nodes(ctx)
		if err != nil {
			return false, nil
		}
		active := 0
		for _, nd := range nodes {
			if nd.GetState() == "active" {
				active++
			}
		}
		return active >= n, nil
	})
}

// assign puts a shard on node with auto_restore.
func (f *procFleet) assign(ctx context.Context, shard, node string, suspected bool) error {
	req := &masterv1.AssignShardRequest{Shard: shard, Node: node, AutoRestore: true, Takeover: masterv1.TakeoverPoint_TAKEOVER_POINT_OFFLINE}
	if suspected {
		req.Takeover = masterv1.TakeoverPoint_TAKEOVER_POINT_SUSPECTED
	}
	fc, err := f.fleetClient(ctx)
	if err != nil {
		return err
	}
	_, err = fc.AssignShard(ctx, connect.NewRequest(req))
	return err
}

// openOn waits until shard is open on a node other than not (any node if
// not is empty) and returns its row.
func (f *procFleet) openOn(ctx context.Context, shard, not string) (*masterv1.ShardInfo, error) {
	var row *masterv1.ShardInfo
	err := pollUntil(ctx, "shard "+shard+" to open", func() (bool, error) {
		rows, err := f.shards(ctx)
		if err != nil {
			return false, nil
		}
		row = rows[shard]
		return row != nil && row.GetState() == "open" && row.GetAssignment().GetNode() != not, nil
	})
	return row, err
}

func pollUntil(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// shardWriter appends unique ops to one shard through its current owner's
// sidecar, found in the master's table (or always through the sidecar pin,
// whoever owns the shard), and remembers every acknowledged op, when it
// was sent and acknowledged, by whom.
type shardWriter struct {
	f     *procFleet
	shard string
	http  *http.Client
	name  string // the ops' prefix (the shard's name if empty)
	pin   string // a sidecar to send every op to

	mu    sync.Mutex
	acked []ackedOp
	errs  int
}

type ackedOp struct {
	op   string
	node string
	term int64
	sent time.Time
	at   time.Time
}

func (w *shardWriter) run(ctx context.Context) {
	var owner, addr string
	var client sidecarv1connect.SidecarServiceClient
	prefix := w.name
	if prefix == "" {
		prefix = w.shard
	}
	for i := 0; ctx.Err() == nil; i++ {
		if client == nil && w.pin != "" {
			owner, addr = w.pin, w.f.sidecar(w.pin).addr
			if !strings.Contains(addr, "://") {
				addr = "http://" + addr
			}
			client = sidecarv1connect.NewSidecarServiceClient(w.http, addr)
		}
		if client == nil {
			rows, err := w.f.shards(ctx)
			row := rows[w.shard]
			if err != nil || row == nil || row.GetState() != "open" || row.GetAddr() == "" {
				_ = demo.Sleep(ctx, 10*time.Millisecond)
				continue
			}
			owner, addr = row.GetAssignment().GetNode(), row.GetAddr()
			client = sidecarv1connect.NewSidecarServiceClient(w.http, addr)
		}
		op := fmt.Sprintf("%s-%d", prefix, i)
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		res, err := client.Append(cctx, connect.NewRequest(&sidecarv1.AppendRequest{Shard: w.shard, Ops: [][]byte{[]byte(op)}}))
		cancel()
		if err != nil {
			w.mu.Lock()
			w.errs++
			w.mu.Unlock()
			client = nil // find the owner again
			_ = demo.Sleep(ctx, 5*time.Millisecond)
			continue
		}
		w.mu.Lock()
		w.acked = append(w.acked, ackedOp{op: op, node: owner, term: res.Msg.GetTerm(), sent: sent, at: time.Now()})
		w.mu.Unlock()
	}
}

// ackedOps returns what was acknowledged so far.
func (w *shardWriter) ackedOps() []ackedOp {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ackedOp(nil), w.acked...)
}

// errors is how many appends failed so far.
func (w *shardWriter) errors() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs
}

// firstAckAfter is the first acknowledgement after t by a node other than
// not.
func (w *shardWriter) firstAckAfter(t time.Time, not string) (ackedOp, bool) {
	for _, a := range w.ackedOps() {
		if a.at.After(t) && a.node != not {
			return a, true
		}
	}
	return ackedOp{}, false
}

// verify reads the shard's lineage on its owner and checks that every
// acknowledged op is there.
func (f *procFleet) verify(ctx context.Context, w *shardWriter) (int, error) {
	row, err := f.openOn(ctx, w.shard, "")
	if err != nil {
		return 0, err
	}
	c := sidecarv1connect.NewSidecarServiceClient(f.http, row.GetAddr())
	st, err := c.Read(ctx, connect.NewRequest(&sidecarv1.ReadRequest{Shard: w.shard}))
	if err != nil {
		return 0, err
	}
	defer st.Close()
	have := map[string]bool{}
	for st.Receive() {
		for _, op := range st.Msg().GetBatch().GetOps() {
			have[string(op)] = true
		}
	}
	if err := st.Err(); err != nil {
		return 0, fmt.Errorf("read %s on %s: %w", w.shard, row.GetAssignment().GetNode(), err)
	}
	acked := w.ackedOps()
	var missing []string
	for _, a := range acked {
		if !have[a.op] {
			missing = append(missing, fmt.Sprintf("%s (acknowledged by %s at term %d)", a.op, a.node, a.term))
		}
	}
	if len(missing) > 0 {
		return len(acked), fmt.Errorf("shard %s: %d of %d acknowledged ops missing from the owner's lineage: %s", w.shard, len(missing), len(acked), strings.Join(missing[:min(len(missing), 5)], ", "))
	}
	return len(acked), nil
}
