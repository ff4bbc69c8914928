package sidecar

import (
	"context"
	"fmt"
	"time"

	"github.com/shardfence/shardfence/internal/defaults"
)

// The replay backlog and the checkpoint policy. A takeover replays the
// translog after the newest checkpoint on the lineage, so a shard that
// never checkpoints takes longer to take over the longer it lives. The
// sidecar cannot checkpoint by itself (the state is the primary's), so it
// asks: once the backlog passes CheckpointPolicy.EveryBytes, or
// CheckpointPolicy.Every passed since the newest checkpoint with something
// written since, it sends the primary a WatchCheckpointRequested event
// naming the generation to cover, and asks again while no checkpoint
// covers it. After each checkpoint published here it runs GC with the
// shard's retention, so the translog below it does not pile up either.

// CheckpointPolicy is when the sidecar asks its primary for a checkpoint.
type CheckpointPolicy struct {
	// EveryBytes asks once the backlog holds this many bytes of ops.
	// Default 64 MiB; negative: never by size.
	EveryBytes int64
	// Every asks once this long passed since the newest checkpoint (or
	// the open) with ops written since. Default 10 min; negative: never
	// by age.
	Every time.Duration
	// WarnBytes makes /readyz warn (still ready) while a shard's backlog
	// holds more than this. Default 4 x EveryBytes; negative: never.
	WarnBytes int64
	// NoGC turns off the GC after each published checkpoint.
	NoGC bool
}

// Defaults of CheckpointPolicy.
const (
	DefaultCheckpointEveryBytes = 64 << 20
	DefaultCheckpointEvery      = 10 * time.Minute
)

func (p CheckpointPolicy) normalized() CheckpointPolicy {
	defaults.Zero(&p.EveryBytes, DefaultCheckpointEveryBytes)
	defaults.Zero(&p.Every, DefaultCheckpointEvery)
	if p.WarnBytes == 0 {
		p.WarnBytes = -1
		if p.EveryBytes > 0 {
			p.WarnBytes = 4 * p.EveryBytes
		}
	}
	return p
}

// reaskAfter is how long a checkpoint request waits before it is sent
// again while nothing covers it.
func (p CheckpointPolicy) reaskAfter() time.Duration {
	d := time.Minute
	if p.Every > 0 {
		d = min(d, max(p.Every/4, time.Second))
	}
	return d
}

// backlog is what a shard knows of its replay backlog.
type backlog struct {
	// ckptGen is the newest checkpoint on the lineage (the restore's, or
	// one published here); ckptAt when it was restored or published.
	ckptGen int64
	ckptAt  time.Time
	// inherited is the bytes of the replay at open: the lineage's ops
	// after ckptGen up to the restore point.
	inherited int64
	// bytes is the payload bytes this term acknowledged so far, base the
	// part of them the newest checkpoint covers; marks samples (gen, bytes)
	// at acknowledgements since ckptGen, so a checkpoint at a generation
	// finds what it covers.
	bytes, base int64
	marks       []backlogMark
	// reqGen is the generation a pending request asks to cover (0: none),
	// sent at reqAt.
	reqGen int64
	reqAt  time.Time
}

type backlogMark struct{ gen, bytes int64 }

// maxBacklogMarks bounds the marks; past it every other one is dropped
// (a coarser, still conservative, account).
const maxBacklogMarks = 1024

// acked records the acknowledgement of gen with the term's cumulative
// bytes.
func (b *backlog) acked(gen, bytes int64) {
	b.bytes = max(b.bytes, bytes)
	if n := len(b.marks); n > 0 && b.marks[n-1].gen >= gen {
		b.marks[n-1].bytes = b.bytes
		return
	}
	b.marks = append(b.marks, backlogMark{gen: gen, bytes: b.bytes})
	if len(b.marks) > maxBacklogMarks {
		kept := b.marks[:0]
		for i, m := range b.marks {
			if i%2 == 1 || i == len(b.marks)-1 {
				kept = append(kept, m)
			}
		}
		b.marks = kept
	}
}

// checkpointed records a checkpoint at gen: the backlog is what came
// after it.
func (b *backlog) checkpointed(gen int64, at time.Time) {
	if gen <= b.ckptGen {
		return
	}
	b.ckptGen, b.ckptAt, b.inherited = gen, at, 0
	kept := b.marks[:0]
	for _, m := range b.marks {
		if m.gen <= gen {
			b.base = max(b.base, m.bytes)
			continue
		}
		kept = append(kept, m)
	}
	b.marks = kept
	if b.reqGen != 0 && gen >= b.reqGen {
		b.reqGen = 0
	}
}

// size is the backlog: bytes of ops and generations after the newest
// checkpoint, up to ackedGen.
func (b *backlog) size(ackedGen int64) (bytes, gens int64) {
	return b.inherited + b.bytes - b.base, max(0, ackedGen-b.ckptGen)
}

// due reports whether to ask for a checkpoint now, and why.
func (b *backlog) due(p CheckpointPolicy, ackedGen int64, now time.Time) (string, bool) {
	bytes, gens := b.size(ackedGen)
	if gens == 0 || (b.reqGen != 0 && now.Sub(b.reqAt) < p.reaskAfter()) {
		return "", false
	}
	switch {
	case p.EveryBytes > 0 && bytes >= p.EveryBytes:
		return fmt.Sprintf("the replay backlog holds %d bytes, at least the %d of --checkpoint-every-bytes", bytes, p.EveryBytes), true
	case p.Every > 0 && !b.ckptAt.IsZero() && now.Sub(b.ckptAt) >= p.Every:
		return fmt.Sprintf("the newest checkpoint is %v old, at least the %v of --checkpoint-every", now.Sub(b.ckptAt).Round(time.Second), p.Every), true
	}
	return "", false
}

// checkpointTick is one look of the policy at every shard: each that is
// due gets a WatchCheckpointRequested event.
func (s *Server) checkpointTick(now time.Time) {
	p := s.opts.Checkpoint
	for _, sh := range s.reg.all() {
		sh.mu.Lock()
		if sh.state != ShardOpen || sh.fenceErr != nil || sh.w == nil || sh.chain == nil || sh.settings.FencingDisabled {
			sh.mu.Unlock()
			continue
		}
		why, ok := sh.backlog.due(p, sh.ackedGen, now)
		var ev WatchEvent
		if ok {
			sh.backlog.reqGen, sh.backlog.reqAt = sh.ackedGen, now
			bytes, gens := sh.backlog.size(sh.ackedGen)
			ev = WatchEvent{Kind: WatchCheckpointRequested, Shard: sh.name, Term: sh.term, Allocation: sh.alloc,
				CheckpointGen: sh.ackedGen, BacklogBytes: bytes, BacklogGens: gens, Reason: why}
		}
		sh.mu.Unlock()
		if ok {
			s.watch.publish(ev)
			s.log.Info("asked the primary for a checkpoint", "shard", ev.Shard, "term", ev.Term, "gen", ev.CheckpointGen,
				"backlog_bytes", ev.BacklogBytes, "backlog_gens", ev.BacklogGens, "why", why)
		}
	}
}

// runCheckpointPolicy ticks the policy until the server stops.
func (s *Server) runCheckpointPolicy() { s.every(checkpointTickEvery, s.checkpointTick) }

// checkpointTickEvery is how often the policy looks at the shards.
const checkpointTickEvery = time.Second

// afterCheckpoint runs GC with the shard's retention after a checkpoint
// was published here (unless the policy turned that off).
func (s *Server) afterCheckpoint(name string) {
	if s.opts.Checkpoint.NoGC {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := s.GC(ctx, name, false); err != nil {
		s.log.Warn("GC after a checkpoint failed; the next checkpoint retries it", "shard", name, "error", err.Error())
	}
}
