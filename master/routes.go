package master

import (
	"context"
	"time"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/master/internal/fleetplan"
)

// The routing feed: where each shard's owner serves, for clients that send
// a shard's calls to its owner's sidecar (client.Router). It shows the
// published table only (what the log made durable and the nodes were
// told), with each owner's registered address and the state its reports
// gave.

// Route is one shard's row of the routing feed.
type Route = masterv1.ShardRoute

// routesResync bounds how long a change the feed was not woken for (none
// is expected) takes to reach a watcher.
const routesResync = time.Second

// WatchShards calls send with the routes of the shards named (every shard
// when none is), first the whole table (snapshot true), then the rows that
// changed each time something published changes them, until ctx ends or
// send fails.
func (m *Master) WatchShards(ctx context.Context, shards []string, send func(routes []*Route, snapshot bool) error) error {
	for _, s := range shards {
		if err := ValidateShardName(s); err != nil {
			return &Error{Op: "WatchShards", Shard: s, Err: err}
		}
	}
	var want map[string]bool
	if len(shards) > 0 {
		want = map[string]bool{}
		for _, s := range shards {
			want[s] = true
		}
	}
	f := m.fleet
	var last map[string]*Route
	for {
		f.mu.Lock()
		cur := f.routesLocked(want)
		wake := f.routesWake
		f.mu.Unlock()
		if last == nil {
			if err := send(fleetplan.SortedRoutes(cur), true); err != nil {
				return err
			}
		} else if changed := fleetplan.DiffRoutes(last, cur); len(changed) > 0 {
			if err := send(changed, false); err != nil {
				return err
			}
		}
		last = cur
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-time.After(routesResync):
		}
	}
}

// routesLocked builds the routes of the published table. The caller holds
// f.mu.
func (f *fleet) routesLocked(want map[string]bool) map[string]*Route {
	out := make(map[string]*Route, len(f.shards))
	for name, e := range f.shards {
		p := e.pub
		if p == nil || p.GetRemoved() || (want != nil && !want[name]) {
			continue
		}
		r := &Route{Shard: name, Term: p.GetTerm(), Node: p.GetNode(), HandoffNode: p.GetHandoffNode(),
			State: fleetplan.RouteState(p.GetNode(), e.state, e.pubVer == e.curVer)}
		if n := f.nodes[r.Node]; n != nil {
			r.Addr, r.AppAddr = n.rec.GetAddr(), n.rec.GetAppAddr()
		}
		if n := f.nodes[r.HandoffNode]; n != nil && r.HandoffNode != "" {
			r.HandoffAddr = n.rec.GetAddr()
		}
		out[name] = r
	}
	return out
}

// routesChangedLocked wakes every routing feed. The caller holds f.mu.
func (f *fleet) routesChangedLocked() {
	close(f.routesWake)
	f.routesWake = make(chan struct{})
}
