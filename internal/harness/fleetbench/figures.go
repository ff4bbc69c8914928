package fleetbench

import (
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/internal/harness/cost"
)

// The bench's decisions, apart from the processes and calls: what to
// assign, when a phase is over, and what the numbers mean.

// assignRequest is the assignment of shard i: auto-restore, taken over
// once its node is offline; the first lostShards go to the node to be
// lost, the rest where the master places them.
func assignRequest(i, lostShards int, lost string) *masterv1.AssignShardRequest {
	req := &masterv1.AssignShardRequest{Shard: shardName(i), AutoRestore: true, Takeover: masterv1.TakeoverPoint_TAKEOVER_POINT_OFFLINE}
	if i < lostShards {
		req.Node = lost
	}
	return req
}

// The store operations of the PUT class (what a store bills as PUT, COPY,
// POST, LIST) and of the GET class.
var (
	putOps = map[string]bool{"Put": true, "CreateIfAbsent": true, "CompareAndSwap": true, "List": true}
	getOps = map[string]bool{"Get": true, "Stat": true, "GetRange": true}
)

// steadyFigures fills in res's steady-state figures from the samples at
// the start and the end of the window: rates per second or per hour,
// both masters' store requests (priced), the primary's log generations,
// and the memory figures at the end.
func steadyFigures(res *Result, s0, s1 sample, price cost.Price) {
	res.Window = s1.at.Sub(s0.at)
	secs := res.Window.Seconds()
	res.PingsPerSec = float64(s1.pings-s0.pings) / secs
	res.PingErrors, res.Registrations = s1.pingErrs-s0.pingErrs, s1.sessions-s0.sessions
	res.CPU = delta(s0.primary, s1.primary, "process_cpu_seconds_total", nil) / secs
	res.StandbyCPU = delta(s0.standby, s1.standby, "process_cpu_seconds_total", nil) / secs
	res.RSS, res.StandbyRSS = gauge(s1.primary, "process_resident_memory_bytes"), gauge(s1.standby, "process_resident_memory_bytes")
	res.Heap, res.Goroutines = gauge(s1.primary, "go_memstats_heap_inuse_bytes"), gauge(s1.primary, "go_goroutines")
	hour := 3600 / secs
	res.PutPerHour, res.WritesPerHour, res.GetPerHour, res.BytesPerHour = 0, 0, 0, 0
	for _, m := range [][2]map[string]*dto.MetricFamily{{s0.primary, s1.primary}, {s0.standby, s1.standby}} {
		res.PutPerHour += hour * delta(m[0], m[1], metered.RequestsMetric, func(l map[string]string) bool { return putOps[l["op"]] })
		res.WritesPerHour += hour * delta(m[0], m[1], metered.RequestsMetric, func(l map[string]string) bool { return putOps[l["op"]] && l["op"] != "List" })
		res.GetPerHour += hour * delta(m[0], m[1], metered.RequestsMetric, func(l map[string]string) bool { return getOps[l["op"]] })
		res.BytesPerHour += hour * delta(m[0], m[1], metered.BytesMetric, func(l map[string]string) bool { return l["direction"] == "write" })
	}
	res.LogGensPerHour = hour * delta(s0.primary, s1.primary, "shardfence_master_oplog_appends_total", nil)
	res.USDPerHour = res.PutPerHour/1000*price.PutPer1k + res.GetPerHour/1000*price.GetPer1k
}

// ownedBy is the shards of table whose owner is node, by name.
func ownedBy(table map[string]*masterv1.ShardInfo, node string) []string {
	var names []string
	for name, s := range table {
		if s.GetAssignment().GetNode() == node {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// applyRoutes applies one message of the routing feed to routes: a
// snapshot replaces them, otherwise the routes it carries replace theirs.
func applyRoutes(routes map[string]*masterv1.ShardRoute, m *masterv1.WatchShardsResponse) {
	if m.GetSnapshot() {
		clear(routes)
	}
	for _, r := range m.GetRoutes() {
		routes[r.GetShard()] = r
	}
}

// moveCount is how many of names the routes show on a node other than
// lost (taken) and, of those, open.
func moveCount(names []string, routes map[string]*masterv1.ShardRoute, lost string) (taken, open int) {
	for _, name := range names {
		if r := routes[name]; r != nil && !r.GetRemoved() && r.GetNode() != lost && r.GetNode() != "" {
			taken++
			if r.GetState() == "open" {
				open++
			}
		}
	}
	return taken, open
}

// observeMove records one look at the lost node's shards, elapsed after
// its last ping: the first time all of them are taken is MoveTaken, the
// first time all are open is Move and ends the phase (true).
func observeMove(res *Result, taken, open, total int, elapsed time.Duration) bool {
	if taken == total && res.MoveTaken == 0 {
		res.MoveTaken = elapsed
	}
	res.MovedOpen = open
	if open == total {
		res.Move = elapsed
		return true
	}
	return false
}

// sameOwner reports whether two rows name the same node and term, and
// with allocation also the same allocation.
func sameOwner(a, b *masterv1.ShardInfo, allocation bool) bool {
	x, y := a.GetAssignment(), b.GetAssignment()
	return x.GetNode() == y.GetNode() && x.GetTerm() == y.GetTerm() && (!allocation || x.GetAllocation() == y.GetAllocation())
}

// sameOwners is how many shards of before the promoted master's after
// shows with the same node, term and allocation.
func sameOwners(before, after map[string]*masterv1.ShardInfo) int {
	n := 0
	for name, b := range before {
		if a := after[name]; a.GetAssignment() != nil && sameOwner(a, b, true) {
			n++
		}
	}
	return n
}

// movedShards is how many shards of before changed owner or term in
// after (a shard missing from after counts as moved).
func movedShards(before, after map[string]*masterv1.ShardInfo) int {
	n := 0
	for name, b := range before {
		if !sameOwner(after[name], b, false) {
			n++
		}
	}
	return n
}

// moveTarget: the lost node's shards are all open elsewhere within
// detection (active + suspicion TTL) plus a second.
func moveTarget(r *Result) (limit time.Duration, met bool) {
	limit = r.ActiveTTL + r.SuspicionTT + time.Second
	return limit, r.Move <= limit
}

// promotionTarget: the standby serves the whole table within the
// election timeout plus two seconds of the kill.
func promotionTarget(r *Result, electionTimeout time.Duration) (limit time.Duration, met bool) {
	limit = electionTimeout + 2*time.Second
	return limit, r.Promote <= limit
}
