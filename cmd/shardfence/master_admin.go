package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/httpauth"
)

// masterConn is how a client reaches the master: its URL, the bearer
// token, and the TLS trust (and client certificate, for mutual TLS). The
// admin commands and a sidecar's --master connection share it.
type masterConn struct {
	addr, tokenFile, caCert, clientCert, clientKey string
}

// masterBase turns an address into the master's base URL: HOST:PORT means
// http://HOST:PORT.
func masterBase(addr string) (string, error) {
	addr = strings.TrimRight(strings.TrimSpace(addr), "/")
	switch {
	case addr == "":
		return "", fmt.Errorf("%w: empty master address", errUsage)
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		return addr, nil
	case strings.Contains(addr, "://"):
		return "", fmt.Errorf("%w: master address %q: use HOST:PORT or http(s)://HOST:PORT", errUsage, clipArg(addr))
	}
	return "http://" + addr, nil
}

// dial returns an HTTP client and the Connect options (the token) for the
// master.
func (c *masterConn) dial() (*http.Client, []connect.ClientOption, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.caCert != "" || c.clientCert != "" || c.clientKey != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.caCert != "" {
			pool, err := loadCAs("--ca-cert", c.caCert)
			if err != nil {
				return nil, nil, err
			}
			cfg.RootCAs = pool
		}
		if (c.clientCert == "") != (c.clientKey == "") {
			return nil, nil, fmt.Errorf("%w: the client certificate and key go together", errUsage)
		}
		if c.clientCert != "" {
			cert, err := tls.LoadX509KeyPair(c.clientCert, c.clientKey)
			if err != nil {
				return nil, nil, fmt.Errorf("%w: client TLS key pair: %v", errUsage, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		tr.TLSClientConfig = cfg
	}
	var opts []connect.ClientOption
	if c.tokenFile != "" {
		tok, err := readToken(c.tokenFile)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, connect.WithInterceptors(httpauth.BearerToken(tok)))
	}
	return &http.Client{Transport: tr}, opts, nil
}

// masterErr keeps the master's message and stable reason on one line.
func masterErr(what, addr string, err error, tokenFile string) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("%s %s: %w", what, addr, err)
	}
	msg := fmt.Sprintf("%s %s: %s: %s", what, addr, ce.Code(), ce.Message())
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*masterv1.ErrorDetail); ok && ed.GetReason() != "" {
				msg += " [" + ed.GetReason() + "]"
			}
		}
	}
	if ce.Code() == connect.CodeUnauthenticated && tokenFile == "" {
		msg += " (the master wants a token: pass --auth-token-file FILE or set SHARDFENCE_MASTER_TOKEN_FILE)"
	}
	return errors.New(msg)
}

// adminFlags are the admin commands' own flags; each command adds the
// ones it takes (addFor).
type adminFlags struct {
	timeout                               time.Duration
	asJSON                                bool
	shard, node, takeover, mode, ackOrder string
	shardList                             []string
	term                                  int64
	autoRestore, unfenced, warm, dryRun   bool
	maxMoves                              int
	lease, waitFor                        time.Duration
}

func (c *masterConn) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", envOr("MASTER_ADDR", "http://127.0.0.1:7500"), "the master's URL or HOST:PORT, or a comma-separated list of the cluster's masters: a command goes to whichever is primary (env SHARDFENCE_MASTER_ADDR)")
	fs.StringVar(&c.tokenFile, "auth-token-file", os.Getenv(envPrefix+"MASTER_TOKEN_FILE"), "file holding the master's bearer token (env SHARDFENCE_MASTER_TOKEN_FILE)")
	fs.StringVar(&c.caCert, "ca-cert", "", "CA bundle (PEM) to verify an HTTPS master with")
	fs.StringVar(&c.clientCert, "client-cert", "", "client certificate (PEM) for a master that requires mutual TLS")
	fs.StringVar(&c.clientKey, "client-key", "", "client certificate's key (PEM)")
}

// addFor adds the flags of admin command cmd.
func (a *adminFlags) addFor(fs *flag.FlagSet, cmd string) {
	defTimeout := 5 * time.Minute
	if cmd == "watch" {
		defTimeout = 0
	}
	fs.DurationVar(&a.timeout, "timeout", defTimeout, "how long to wait for the answer (watch: how long to follow the feed; 0 until interrupted)")
	fs.BoolVar(&a.asJSON, "json", false, "print JSON (nodes, shards, watch)")
	switch cmd {
	case "assign":
		fs.StringVar(&a.shard, "shard", "", "shard id (required)")
		fs.StringVar(&a.node, "node", "", "node to open it on (default: the master picks an active node)")
		fs.Int64Var(&a.term, "term", 0, "term to open at (default 1; a stale grant is raised above the shard's stored terms)")
		fs.BoolVar(&a.autoRestore, "auto-restore", false, "move the shard to a live node at a higher term by itself when its owner goes offline (fenced shards only)")
		fs.StringVar(&a.takeover, "takeover", "offline", "when an auto-restore shard moves: offline, or already suspected")
		fs.StringVar(&a.mode, "fencing-mode", "", "per_sync, lease, create_only or observe (default: the sidecar's; observe goes without --auto-restore)")
		fs.StringVar(&a.ackOrder, "ack-order", "", "concurrent or sequenced (default: the sidecar's)")
		fs.DurationVar(&a.lease, "lease-interval", 0, "lease of lease mode (default: the sidecar's)")
		fs.BoolVar(&a.unfenced, "unfenced", false, "open the shard with fencing disabled (benchmarks only; never auto-restored)")
		fs.BoolVar(&a.warm, "warm", false, "the owner opens the shard warm: appends once the translog after the checkpoint is replayed, checkpoint files served on demand (the primary reads them with ReadCheckpointFile), so a large shard takes over as fast as a small one")
	case "unassign":
		fs.StringVar(&a.shard, "shard", "", "shard id (required)")
	case "watch":
		fs.Func("shard", "follow only this shard (repeatable; default every shard)", func(v string) error {
			a.shardList = append(a.shardList, v)
			return nil
		})
	case "move":
		fs.StringVar(&a.shard, "shard", "", "shard id (required)")
		fs.StringVar(&a.node, "node", "", "node to move it to (required): active, not draining, not its owner")
		fs.DurationVar(&a.waitFor, "wait", 0, "wait this long for the target to own the shard (0: do not wait)")
	case "rebalance":
		fs.BoolVar(&a.dryRun, "dry-run", false, "print the plan and move nothing")
		fs.IntVar(&a.maxMoves, "max-moves", 4, "how many moves run at once (1 to 64)")
	case "drain", "undrain":
		fs.StringVar(&a.node, "node", "", "node name (required)")
		if cmd == "drain" {
			fs.DurationVar(&a.waitFor, "wait", 0, "wait this long for the node to hold no shard (0: do not wait)")
		}
	}
}

// check refuses what admin command cmd cannot run with.
func (a *adminFlags) check(cmd string) error {
	switch {
	case (cmd == "assign" || cmd == "unassign" || cmd == "move") && a.shard == "":
		return fmt.Errorf("%w: --shard is required", errUsage)
	case (cmd == "drain" || cmd == "undrain" || cmd == "move") && a.node == "":
		return fmt.Errorf("%w: --node is required", errUsage)
	case cmd == "rebalance" && (a.maxMoves < 1 || a.maxMoves > 64):
		return fmt.Errorf("%w: --max-moves %d is outside 1..64", errUsage, a.maxMoves)
	case (a.timeout <= 0 && !(cmd == "watch" && a.timeout == 0)) || a.timeout > maxClientTimeout:
		return fmt.Errorf("%w: --timeout %v is outside (0, %v]", errUsage, a.timeout, maxClientTimeout)
	}
	return nil
}

// adminEnv is what a fleet admin command runs with: the primary's fleet
// service, and the whole cluster for watch.
type adminEnv struct {
	*adminFlags
	hc     *http.Client
	opts   []connect.ClientOption
	bases  []string
	base   string // the primary
	fc     masterv1connect.MasterFleetServiceClient
	stdout io.Writer
	fail   func(error) error
}

// fleetAdmin are the admin commands of the primary's fleet service.
var fleetAdmin = map[string]func(ctx context.Context, e *adminEnv) error{
	"nodes":     adminNodes,
	"shards":    adminShards,
	"watch":     adminWatch,
	"assign":    adminAssign,
	"unassign":  adminUnassign,
	"move":      adminMove,
	"rebalance": adminRebalance,
	"drain":     adminDrain,
	"undrain":   adminUndrain,
}

// runMasterAdmin runs `shardfence master promote|status|snapshot|nodes|
// shards|assign|unassign|move|rebalance|drain|undrain`.
func runMasterAdmin(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("master "+cmd, stdout)
	var c masterConn
	c.addFlags(fs)
	a := &adminFlags{}
	a.addFor(fs, cmd)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, clipArg(fs.Arg(0)))
	}
	if err := a.check(cmd); err != nil {
		return err
	}
	bases, err := masterBases(c.addr)
	if err != nil {
		return err
	}
	hc, opts, err := c.dial()
	if err != nil {
		return err
	}
	cancel := func() {}
	if a.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
	}
	defer cancel()
	switch {
	case cmd == "status":
		return masterStatus(ctx, hc, opts, bases, stdout, c.tokenFile)
	case cmd == "promote" && len(bases) > 1:
		return fmt.Errorf("%w: promote takes the one master to promote in --addr, not a list", errUsage)
	}
	// Every other command needs the primary: the one the masters name.
	base := bases[0]
	if cmd != "promote" {
		if base, err = findPrimary(ctx, hc, opts, bases); err != nil {
			return err
		}
	}
	fail := func(err error) error { return masterErr("master "+cmd, base, err, c.tokenFile) }
	if cmd == "promote" || cmd == "snapshot" {
		return masterHA(ctx, masterv1connect.NewMasterHAServiceClient(hc, base, opts...), cmd, stdout, fail)
	}
	run := fleetAdmin[cmd]
	if run == nil {
		return nil
	}
	return run(ctx, &adminEnv{adminFlags: a, hc: hc, opts: opts, bases: bases, base: base,
		fc: masterv1connect.NewMasterFleetServiceClient(hc, base, opts...), stdout: stdout, fail: fail})
}

func adminNodes(ctx context.Context, e *adminEnv) error {
	res, err := e.fc.ListNodes(ctx, connect.NewRequest(&masterv1.ListNodesRequest{}))
	if err != nil {
		return e.fail(err)
	}
	if e.asJSON {
		return printProtoJSON(e.stdout, res.Msg)
	}
	printNodes(e.stdout, res.Msg.GetNodes())
	return nil
}

func adminShards(ctx context.Context, e *adminEnv) error {
	res, err := e.fc.ListShards(ctx, connect.NewRequest(&masterv1.ListShardsRequest{}))
	if err != nil {
		return e.fail(err)
	}
	if e.asJSON {
		return printProtoJSON(e.stdout, res.Msg)
	}
	printShards(e.stdout, res.Msg.GetShards())
	return nil
}

func adminWatch(ctx context.Context, e *adminEnv) error {
	return watchRoutes(ctx, e.hc, e.opts, e.bases, e.base, e.shardList, e.asJSON, e.stdout, e.fail)
}

// assignRequest is the AssignShard request the assign flags ask for.
func (a *adminFlags) assignRequest() (*masterv1.AssignShardRequest, error) {
	if a.unfenced && (a.mode != "" || a.lease != 0) {
		return nil, fmt.Errorf("%w: --unfenced goes without --fencing-mode and --lease-interval", errUsage)
	}
	req := &masterv1.AssignShardRequest{Shard: a.shard, Node: a.node, Term: a.term, AutoRestore: a.autoRestore, Warm: a.warm, Settings: &sidecarv1.ShardSettings{FencingDisabled: a.unfenced}}
	switch a.takeover {
	case "offline":
		req.Takeover = masterv1.TakeoverPoint_TAKEOVER_POINT_OFFLINE
	case "suspected":
		req.Takeover = masterv1.TakeoverPoint_TAKEOVER_POINT_SUSPECTED
	default:
		return nil, fmt.Errorf("%w: --takeover %q (offline or suspected)", errUsage, a.takeover)
	}
	if a.mode != "" {
		m, err := parseModeProto(a.mode)
		if err != nil {
			return nil, err
		}
		req.Settings.Mode = m
	}
	if a.ackOrder != "" {
		o, err := parseAckOrderProto(a.ackOrder)
		if err != nil {
			return nil, err
		}
		req.Settings.AckOrder = o
	}
	req.Settings.LeaseIntervalMs = a.lease.Milliseconds()
	return req, nil
}

func adminAssign(ctx context.Context, e *adminEnv) error {
	req, err := e.assignRequest()
	if err != nil {
		return err
	}
	res, err := e.fc.AssignShard(ctx, connect.NewRequest(req))
	if err != nil {
		return e.fail(err)
	}
	as := res.Msg.GetShard().GetAssignment()
	fmt.Fprintf(e.stdout, "assigned %s to node %s at term %d (allocation %s)\n", as.GetShard(), as.GetNode(), as.GetTerm(), as.GetAllocation())
	return nil
}

func adminUnassign(ctx context.Context, e *adminEnv) error {
	if _, err := e.fc.UnassignShard(ctx, connect.NewRequest(&masterv1.UnassignShardRequest{Shard: e.shard})); err != nil {
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "unassigned %s: its owner closes it\n", e.shard)
	return nil
}

func adminMove(ctx context.Context, e *adminEnv) error {
	res, err := e.fc.MoveShard(ctx, connect.NewRequest(&masterv1.MoveShardRequest{Shard: e.shard, Node: e.node}))
	if err != nil {
		return e.fail(err)
	}
	as := res.Msg.GetShard().GetAssignment()
	fmt.Fprintf(e.stdout, "moving %s from %s to %s at term %d\n", e.shard, as.GetNode(), e.node, as.GetTerm())
	if e.waitFor <= 0 {
		return nil
	}
	wctx, wcancel := context.WithTimeout(ctx, e.waitFor)
	defer wcancel()
	if err := waitMove(wctx, e.fc, e.shard, e.node); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return fmt.Errorf("%s still moving to %s after %v (see shardfence master shards)", e.shard, e.node, e.waitFor)
		}
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "%s is on node %s\n", e.shard, e.node)
	return nil
}

func adminRebalance(ctx context.Context, e *adminEnv) error {
	return rebalance(ctx, e.fc, e.dryRun, e.maxMoves, e.stdout, e.fail)
}

func adminUndrain(ctx context.Context, e *adminEnv) error {
	if _, err := e.fc.DrainNode(ctx, connect.NewRequest(&masterv1.DrainNodeRequest{Node: e.node, Undo: true})); err != nil {
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "node %s takes shards again\n", e.node)
	return nil
}

func adminDrain(ctx context.Context, e *adminEnv) error {
	res, err := e.fc.DrainNode(ctx, connect.NewRequest(&masterv1.DrainNodeRequest{Node: e.node}))
	if err != nil {
		return e.fail(err)
	}
	fmt.Fprintf(e.stdout, "draining %s: %d shards moving, %d waiting for a target\n", e.node, res.Msg.GetMoving(), res.Msg.GetWaiting())
	if e.waitFor <= 0 {
		return nil
	}
	deadline := time.Now().Add(e.waitFor)
	for {
		res, err := e.fc.ListShards(ctx, connect.NewRequest(&masterv1.ListShardsRequest{}))
		if err != nil {
			return e.fail(err)
		}
		left := 0
		for _, s := range res.Msg.GetShards() {
			if s.GetAssignment().GetNode() == e.node {
				left++
			}
		}
		if left == 0 {
			fmt.Fprintf(e.stdout, "node %s holds no shard\n", e.node)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s still holds %d shards after %v (see shardfence master shards)", e.node, left, e.waitFor)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// errMoveCancelled: a move ended with the shard still on its source (the
// handoff was cancelled: the target failed, or went away).
var errMoveCancelled = errors.New("move cancelled")

// waitMove waits until the move of shard to node ended: nil once node owns
// it, errMoveCancelled (with the master's reason) when the handoff ended
// without moving it, or ctx's error.
func waitMove(ctx context.Context, fc masterv1connect.MasterFleetServiceClient, shard, node string) error {
	for {
		res, err := fc.ListShards(ctx, connect.NewRequest(&masterv1.ListShardsRequest{}))
		if err != nil {
			return err
		}
		found := false
		for _, s := range res.Msg.GetShards() {
			a := s.GetAssignment()
			if a.GetShard() != shard {
				continue
			}
			found = true
			switch {
			case a.GetNode() == node && a.GetHandoffNode() == "":
				return nil
			case a.GetHandoffNode() != node:
				return fmt.Errorf("%w: %s is on node %q (%s)", errMoveCancelled, shard, a.GetNode(), s.GetReason())
			}
		}
		if !found {
			return fmt.Errorf("%w: %s left the table", errMoveCancelled, shard)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rebalance prints the master's rebalance plan and, unless dryRun, carries
// it out: each planned shard is moved once (MoveShard), at most maxMoves
// at a time, each waited for until its target owns it or the handoff was
// cancelled. It fails when a move did.
func rebalance(ctx context.Context, fc masterv1connect.MasterFleetServiceClient, dryRun bool, maxMoves int, stdout io.Writer, fail func(error) error) error {
	res, err := fc.PlanRebalance(ctx, connect.NewRequest(&masterv1.PlanRebalanceRequest{}))
	if err != nil {
		return fail(err)
	}
	plan := res.Msg
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSHARDS\tAFTER")
	for _, n := range plan.GetNodes() {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", n.GetNode(), n.GetBefore(), n.GetAfter())
	}
	_ = tw.Flush()
	if len(plan.GetMoves()) == 0 {
		fmt.Fprintln(stdout, "balanced: nothing to move")
		return nil
	}
	fmt.Fprintf(stdout, "plan: %d moves\n", len(plan.GetMoves()))
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tFROM\tTO")
	for _, mv := range plan.GetMoves() {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mv.GetShard(), mv.GetFrom(), mv.GetTo())
	}
	_ = tw.Flush()
	if dryRun {
		fmt.Fprintln(stdout, "dry run: nothing moved")
		return nil
	}
	var (
		mu     sync.Mutex
		failed int
		wg     sync.WaitGroup
	)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format, args...)
	}
	slots := make(chan struct{}, maxMoves)
	for _, mv := range plan.GetMoves() {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			err := func() error {
				if _, err := fc.MoveShard(ctx, connect.NewRequest(&masterv1.MoveShardRequest{Shard: mv.GetShard(), Node: mv.GetTo()})); err != nil {
					return fail(err)
				}
				say("moving %s from %s to %s\n", mv.GetShard(), mv.GetFrom(), mv.GetTo())
				return waitMove(ctx, fc, mv.GetShard(), mv.GetTo())
			}()
			if err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
				say("move of %s to %s failed: %v\n", mv.GetShard(), mv.GetTo(), err)
				return
			}
			say("%s is on node %s\n", mv.GetShard(), mv.GetTo())
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rebalance stopped: %w (moves started run on; see shardfence master shards)", err)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d moves failed (see above; shardfence master rebalance plans again)", failed, len(plan.GetMoves()))
	}
	fmt.Fprintf(stdout, "rebalanced: %d moves done\n", len(plan.GetMoves()))
	return nil
}

// masterBases parses --addr: one master, or a comma-separated list.
func masterBases(addrs string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(addrs, ",") {
		if strings.TrimSpace(a) == "" && strings.Contains(addrs, ",") {
			continue
		}
		b, err := masterBase(a)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty master address", errUsage)
	}
	return out, nil
}

// findPrimary returns the master of bases that serves as primary, or the
// one their answers name (a standby or a fenced master names the primary
// it knows of). With one address and no primary known, that address is
// used as given: the call's own error says what the master is.
func findPrimary(ctx context.Context, hc *http.Client, opts []connect.ClientOption, bases []string) (string, error) {
	p, answers, ok := client.NewMasters(hc, bases, opts...).Find(ctx, 5*time.Second)
	if ok {
		return p.Addr, nil
	}
	if len(bases) == 1 {
		return bases[0], nil
	}
	var why []string
	for _, a := range answers {
		switch {
		case a.Err != nil:
			why = append(why, fmt.Sprintf("%s: %v", a.Addr, a.Err))
		default:
			why = append(why, fmt.Sprintf("%s: %s, %v", a.Addr, roleName(a.Role), a.Leader))
		}
	}
	return "", fmt.Errorf("no master of %s is primary or knows the primary (an election may be under way: retry in a few seconds): %s", strings.Join(bases, ","), strings.Join(why, "; "))
}

func roleName(r masterv1.MasterRole) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "MASTER_ROLE_"))
}

// masterStatus prints each master's status: its role, term, position and
// the primary it knows of.
func masterStatus(ctx context.Context, hc *http.Client, opts []connect.ClientOption, bases []string, stdout io.Writer, tokenFile string) error {
	var errs []error
	for _, base := range bases {
		fail := func(err error) error { return masterErr("master status", base, err, tokenFile) }
		if len(bases) > 1 {
			fmt.Fprintf(stdout, "%s: ", base)
		}
		if err := masterHA(ctx, masterv1connect.NewMasterHAServiceClient(hc, base, opts...), "status", stdout, fail); err != nil {
			if len(bases) == 1 {
				return err
			}
			fmt.Fprintf(stdout, "unreachable: %v\n", err)
			errs = append(errs, err)
		}
	}
	if len(errs) == len(bases) {
		return errors.Join(errs...)
	}
	return nil
}

// watchRoutes prints the routing feed (WatchShards) until ctx ends: the
// table first, then each change; it follows the primary across master
// failovers.
func watchRoutes(ctx context.Context, hc *http.Client, opts []connect.ClientOption, bases []string, base string, shards []string, asJSON bool, stdout io.Writer, fail func(error) error) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(tw, "TIME\tSHARD\tTERM\tNODE\tSTATE\tADDR\tAPP")
		_ = tw.Flush()
	}
	for {
		st, err := masterv1connect.NewMasterFleetServiceClient(hc, base, opts...).WatchShards(ctx, connect.NewRequest(&masterv1.WatchShardsRequest{Shards: shards}))
		if err == nil {
			for st.Receive() {
				m := st.Msg()
				if asJSON {
					if err := printProtoJSON(stdout, m); err != nil {
						return err
					}
					continue
				}
				now := time.Now().Format("15:04:05.000")
				if m.GetSnapshot() && len(m.GetRoutes()) == 0 {
					fmt.Fprintf(tw, "%s\t(no shard)\t\t\t\t\t\n", now)
				}
				for _, r := range m.GetRoutes() {
					switch {
					case r.GetRemoved():
						fmt.Fprintf(tw, "%s\t%s\t-\t-\tremoved\t\t\n", now, r.GetShard())
					default:
						node := r.GetNode()
						if node == "" {
							node = "-"
						}
						if h := r.GetHandoffNode(); h != "" {
							node += " -> " + h
						}
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", now, r.GetShard(), r.GetTerm(), node, r.GetState(), r.GetAddr(), r.GetAppAddr())
					}
				}
				_ = tw.Flush()
			}
			err = st.Err()
			st.Close()
		}
		if ctx.Err() != nil {
			return nil
		}
		if len(bases) == 1 && err != nil && connect.CodeOf(err) != connect.CodeUnavailable {
			return fail(err)
		}
		// The master stopped serving or went away: find the primary again.
		fmt.Fprintf(stdout, "# %s: the feed ended (%v); finding the primary\n", time.Now().Format("15:04:05.000"), err)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(250 * time.Millisecond):
			}
			if b, err := findPrimary(ctx, hc, opts, bases); err == nil {
				base = b
				break
			}
		}
	}
}

func masterHA(ctx context.Context, c masterv1connect.MasterHAServiceClient, cmd string, stdout io.Writer, fail func(error) error) error {
	switch cmd {
	case "promote":
		res, err := c.Promote(ctx, connect.NewRequest(&masterv1.PromoteRequest{}))
		if err != nil {
			return fail(err)
		}
		r := res.Msg
		fmt.Fprintf(stdout, "promoted: term %d, log up to generation %d (%d replayed), %d objects, %d segments awaiting remount, %d ms\n",
			r.GetTerm(), r.GetRestoreGen(), r.GetReplayedGens(), r.GetObjects(), r.GetSegmentsAwaitingRemount(), r.GetDurationMs())
	case "status":
		res, err := c.Status(ctx, connect.NewRequest(&masterv1.StatusRequest{}))
		if err != nil {
			return fail(err)
		}
		r := res.Msg
		role := roleName(r.GetRole())
		term := "term none (a standby holds none until promoted or elected)"
		if r.GetTerm() > 0 {
			term = fmt.Sprintf("term %d", r.GetTerm())
		}
		primary := "primary unknown (an election may be under way)"
		if r.GetLeaderTerm() > 0 {
			primary = fmt.Sprintf("primary %s at term %d (%s)", r.GetLeaderNode(), r.GetLeaderTerm(), r.GetLeaderAddr())
		}
		fmt.Fprintf(stdout, "role %s, node %s, %s, cluster %q (shard %s), %s, generation %d, next seq %d, lag %d entries / %d ms, snapshot %q (generation %d)",
			role, r.GetNode(), primary, r.GetCluster(), r.GetShard(), term, r.GetAppliedGen(), r.GetNextSeqNo(), r.GetLagEntries(), r.GetLagMs(), r.GetLastSnapshot(), r.GetLastSnapshotGen())
		switch et := r.GetElectionTimeoutMs(); {
		case et == 0:
			fmt.Fprint(stdout, ", elections off")
		case r.GetRole() == masterv1.MasterRole_MASTER_ROLE_STANDBY:
			fmt.Fprintf(stdout, ", election timeout %v (would claim in %v without a sign of the primary)", time.Duration(et)*time.Millisecond, time.Duration(r.GetElectionInMs())*time.Millisecond)
		default:
			fmt.Fprintf(stdout, ", election timeout %v", time.Duration(et)*time.Millisecond)
		}
		fmt.Fprintln(stdout)
		if e := r.GetError(); e != "" {
			fmt.Fprintf(stdout, "error: %s\n", e)
		}
	case "snapshot":
		res, err := c.Snapshot(ctx, connect.NewRequest(&masterv1.SnapshotRequest{}))
		if err != nil {
			return fail(err)
		}
		r := res.Msg
		fmt.Fprintf(stdout, "snapshot %s: generation %d, %d objects, %d bytes, %d ms (changes held back %d us)\n",
			r.GetKey(), r.GetGen(), r.GetObjects(), r.GetBytes(), r.GetDurationMs(), r.GetPauseUs())
	}
	return nil
}

func printProtoJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func printNodes(w io.Writer, nodes []*masterv1.NodeInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tLAST PING\tINCARNATION\tSHARDS\tDRAINING\tADDR\tNOTE")
	for _, n := range nodes {
		ping := "-"
		if n.GetLastPingAgeMs() >= 0 {
			ping = (time.Duration(n.GetLastPingAgeMs()) * time.Millisecond).String() + " ago"
		}
		note := n.GetOffboarding()
		if !n.GetFencing() {
			note = strings.TrimPrefix(note+"; store did not pass the precondition probe", "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%v\t%s\t%s\n", n.GetName(), n.GetState(), ping, n.GetIncarnation(), n.GetShards(), yesNo(n.GetDraining()), n.GetAddr(), note)
	}
	_ = tw.Flush()
}

func printShards(w io.Writer, shards []*masterv1.ShardInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tTERM\tNODE\tSTATE\tOWNER\tAUTO RESTORE\tDURABLE\tREASON")
	for _, s := range shards {
		a := s.GetAssignment()
		auto := "off"
		if a.GetAutoRestore() {
			auto = "at offline"
			if a.GetTakeoverAtSuspected() {
				auto = "at suspected"
			}
		} else if a.GetSettings().GetFencingDisabled() {
			auto = "off (unfenced)"
		}
		node := a.GetNode()
		if node == "" {
			node = "-"
		}
		if h := a.GetHandoffNode(); h != "" {
			node += " -> " + h
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.GetShard(), a.GetTerm(), node, s.GetState(), s.GetOwnerState(), auto, yesNo(s.GetDurable()), s.GetReason())
	}
	_ = tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
