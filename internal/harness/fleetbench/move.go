package fleetbench

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/clock"
)

// moveLimit bounds the wait for the lost node's shards to open elsewhere.
const moveLimit = 5 * time.Minute

// loseNode stops the first node's pings and watch (its process froze or
// its host is gone) and measures its shards moving once the master takes
// it offline, through the routing feed of those shards (which tells when
// each moved and opened without listing the whole table again and again).
func (r *run) loseNode(ctx context.Context) error {
	lost := r.nodes[0]
	names := ownedBy(r.table, lost.name)
	if len(names) < r.cfg.LostShards {
		return fmt.Errorf("node %s owns %d shards, not the %d assigned to it", lost.name, len(names), r.cfg.LostShards)
	}
	// The master may have placed a few more there (the least loaded).
	r.res.LostShards = len(names)
	fctx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	feed, err := newShardFeed(fctx, r.prim.Base, names)
	if err != nil {
		return err
	}
	before, _ := scrape(ctx, r.hc, r.prim.Base)
	r.cancels[0]()
	lastPing, err := r.lastHeard(ctx, lost)
	if err != nil {
		return err
	}
	r.say("node %s stopped (the master last heard from it %v ago), %d shards to move", lost.name, time.Since(lastPing).Round(time.Millisecond), len(names))
	go func() {
		<-time.After(moveLimit)
		stopFeed()
	}()
	for {
		taken, open := moveCount(names, feed.routes, lost.name)
		if observeMove(r.res, taken, open, len(names), time.Since(lastPing)) {
			break
		}
		if timedOut, err := feed.next(); timedOut {
			return fmt.Errorf("the lost node's shards: %d of %d open elsewhere after 5 minutes (the feed: %v)", open, len(names), err)
		} else if err != nil {
			return err
		}
	}
	r.res.FeedRestarts = feed.restarts
	stopFeed()
	if after, err := scrape(ctx, r.hc, r.prim.Base); err == nil && before != nil {
		r.res.MoveStalls = int(delta(before, after, "shardfence_master_liveness_monitor_stalls_total", nil))
	}
	r.say("the lost node's shards open elsewhere %v after its last ping (recorded elsewhere after %v; %d monitor stalls; the feed followed again %d times)",
		r.res.Move.Round(time.Millisecond), r.res.MoveTaken.Round(time.Millisecond), r.res.MoveStalls, r.res.FeedRestarts)
	r.res.ActiveTTL, r.res.SuspicionTT = lost.ttls()
	return nil
}

// lastHeard is where detection starts: the master's last signal from the
// node (a ping the node gave up on may still have reached it). When the
// master does not answer, the node's own last answered ping: a later one
// may have reached the master, so the figure is an upper bound then.
func (r *run) lastHeard(ctx context.Context, lost *simNode) (time.Time, error) {
	if err := clock.Sleep(ctx, benchClock, 200*time.Millisecond); err != nil {
		return time.Time{}, err
	}
	lastPing := lost.lastPingAt()
	ns, err := r.pfc.ListNodes(ctx, connect.NewRequest(&masterv1.ListNodesRequest{}))
	if err != nil {
		r.say("the master did not list its nodes (%v): counting from the node's last answered ping", err)
		return lastPing, nil
	}
	for _, n := range ns.Msg.GetNodes() {
		if n.GetName() == lost.name {
			lastPing = time.Now().Add(-time.Duration(n.GetLastPingAgeMs()) * time.Millisecond)
		}
	}
	return lastPing, nil
}

// shardFeed follows the routing feed of some shards, again when it ends.
type shardFeed struct {
	ctx      context.Context
	fc       masterv1connect.MasterFleetServiceClient
	names    []string
	st       *connect.ServerStreamForClient[masterv1.WatchShardsResponse]
	routes   map[string]*masterv1.ShardRoute
	restarts int
}

// newShardFeed opens the feed and applies its first message.
func newShardFeed(ctx context.Context, base string, names []string) (*shardFeed, error) {
	// A stream outlives any client timeout: its own client has none.
	f := &shardFeed{ctx: ctx, fc: masterv1connect.NewMasterFleetServiceClient(&http.Client{}, base), names: names, routes: map[string]*masterv1.ShardRoute{}}
	st, err := f.fc.WatchShards(ctx, connect.NewRequest(&masterv1.WatchShardsRequest{Shards: names}))
	if err != nil {
		return nil, err
	}
	f.st = st
	if !st.Receive() {
		return nil, fmt.Errorf("the routing feed of the lost node's shards: %v", st.Err())
	}
	applyRoutes(f.routes, st.Msg())
	return f, nil
}

// next waits for the feed's next message and applies it. A feed that
// ended (the master cut it, or the connection broke) is followed again:
// its first message is a snapshot. Once the feed's context is done it
// gives up: timedOut, with the feed's last error.
func (f *shardFeed) next() (timedOut bool, err error) {
	for !f.st.Receive() {
		ferr := f.st.Err()
		_ = f.st.Close()
		if f.ctx.Err() != nil {
			return true, ferr
		}
		f.restarts++
		_ = clock.Sleep(f.ctx, benchClock, 100*time.Millisecond)
		st, err := f.fc.WatchShards(f.ctx, connect.NewRequest(&masterv1.WatchShardsRequest{Shards: f.names}))
		if err != nil {
			return false, err
		}
		f.st = st
	}
	applyRoutes(f.routes, f.st.Msg())
	return false, nil
}
