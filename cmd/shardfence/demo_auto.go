package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardfence/shardfence/internal/harness/demo"
)

// runDemoAuto shows automatic failover with real processes: a master, three
// sidecars registered with it, a client appending through the shard's
// owner; the owner is SIGKILLed and the shard comes back on another
// sidecar with no command, holding every acknowledged op.
func runDemoAuto(ctx context.Context, c fleetCmd, url string, phase time.Duration, stdout io.Writer) error {
	const active, suspicion = time.Second, time.Second
	ctx, f, tl, where, stopFleet, err := demoFleet(ctx, c, url, stdout)
	if err != nil {
		return err
	}
	defer stopFleet()
	tl.Say("store %s; starting the master (client TTLs: active %v, suspicion %v)", where, active, suspicion)
	if err := f.startMaster("--client-active-ttl", active.String(), "--client-suspicion-ttl", suspicion.String(), "--liveness-interval", "50ms"); err != nil {
		return err
	}
	for _, n := range []string{"A", "B", "C"} {
		if _, err := f.startSidecar(n, "--log-level", "warn"); err != nil {
			return err
		}
	}
	if err := f.waitNodes(ctx, 3); err != nil {
		return err
	}
	tl.Say("sidecars A, B and C registered with the master and ping it")
	const shard = "demo"
	if err := f.assign(ctx, shard, "A", false); err != nil {
		return err
	}
	row, err := f.openOn(ctx, shard, "")
	if err != nil {
		return err
	}
	tl.Say("master assigned shard %q to A at term %d (auto_restore); A opened it", shard, row.GetAssignment().GetTerm())
	w := &shardWriter{f: f, shard: shard, http: f.http}
	wctx, stopWriter := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.run(wctx) }()
	defer func() { stopWriter(); <-done }()
	if err := demo.Sleep(ctx, phase); err != nil {
		return err
	}
	tl.Say("a client appends through the shard's owner: %d ops acknowledged by A", len(w.ackedOps()))
	f.sidecar("A").kill()
	killed := time.Now()
	tl.Say("SIGKILL sidecar A")
	if err := demoAutoTakeover(ctx, f, tl, shard); err != nil {
		return err
	}
	row, _ = f.openOn(ctx, shard, "A")
	tl.Say("%s claimed term %d, sealed A's term, restored the lineage and opened the shard, with no command", row.GetAssignment().GetNode(), row.GetAssignment().GetTerm())
	if err := pollUntil(ctx, "the first ack on the new owner", func() (bool, error) {
		_, ok := w.firstAckAfter(killed, "A")
		return ok, nil
	}); err != nil {
		return err
	}
	first, _ := w.firstAckAfter(killed, "A")
	tl.Say("the client's first append acknowledged by %s, %v after the kill", first.node, first.at.Sub(killed).Round(time.Millisecond))
	if err := demo.Sleep(ctx, phase); err != nil {
		return err
	}
	stopWriter()
	<-done
	n, err := f.verify(ctx, w)
	if err != nil {
		return err
	}
	tl.Say("acknowledged %d ops (%s); every one is in %s's lineage: lost 0", n, acksByNode(w.ackedOps(), "A", "B", "C"), row.GetAssignment().GetNode())
	if err := demoAutoReturn(ctx, f, tl, shard); err != nil {
		return err
	}
	tl.Say("ok: the shard failed over by itself and every acknowledged op is readable")
	return nil
}

// demoAutoTakeover waits for the shard to be open on another sidecar at a
// higher term, saying on the timeline what the master sees of node A and
// of the shard as it happens.
func demoAutoTakeover(ctx context.Context, f *procFleet, tl *demo.Timeline, shard string) error {
	seen := map[string]bool{}
	return pollUntil(ctx, "the shard back on another sidecar", func() (bool, error) {
		if nodes, err := f.nodes(ctx); err == nil {
			for _, n := range nodes {
				if n.GetName() == "A" && !seen[n.GetState()] {
					seen[n.GetState()] = true
					tl.Say("master: node A is %s", n.GetState())
				}
			}
		}
		rows, err := f.shards(ctx)
		if err != nil {
			return false, nil
		}
		r := rows[shard]
		a := r.GetAssignment()
		if a.GetTerm() >= 2 && !seen["assigned"] {
			seen["assigned"] = true
			tl.Say("master: shard %q taken over: term %d on %s (%s), recorded in its log before telling %s", shard, a.GetTerm(), a.GetNode(), a.GetReason(), a.GetNode())
		}
		return a.GetTerm() >= 2 && r.GetState() == "open", nil
	})
}

// acksByNode says how many of acks each of nodes acknowledged ("A 10 + B
// 5"), leaving out the nodes with none.
func acksByNode(acks []ackedOp, nodes ...string) string {
	byNode := map[string]int{}
	for _, a := range acks {
		byNode[a.node]++
	}
	var parts []string
	for _, name := range nodes {
		if byNode[name] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", name, byNode[name]))
		}
	}
	return strings.Join(parts, " + ")
}

// demoAutoReturn restarts sidecar A and checks it does not get the shard
// back.
func demoAutoReturn(ctx context.Context, f *procFleet, tl *demo.Timeline, shard string) error {
	if _, err := f.startSidecar("A", "--log-level", "warn"); err != nil {
		return err
	}
	if err := f.waitNodes(ctx, 3); err != nil {
		return err
	}
	if err := demo.Sleep(ctx, time.Second); err != nil {
		return err
	}
	rows, err := f.shards(ctx)
	if err != nil {
		return err
	}
	if a := rows[shard].GetAssignment(); a.GetNode() == "A" {
		return fmt.Errorf("the returning sidecar A got the shard back: %v", a)
	}
	tl.Say("sidecar A restarted: it registered as a new incarnation and holds nothing; %q stays on %s", shard, rows[shard].GetAssignment().GetNode())
	return nil
}
