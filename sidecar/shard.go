package sidecar

import (
	"errors"
	"sync"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// shard is one shard open (or opening) on this sidecar. The fields above
// mu are set by install, under mu, before the shard leaves ShardOpening,
// and do not change after.
type shard struct {
	name     string
	store    *blobstore.Container
	term     int64
	alloc    string
	settings Settings
	chain    *fence.Chain
	restore  RestorePoint
	startGen int64
	lineage  seal.Lineage
	// stallAfter is the server's Options.StallAfter.
	stallAfter time.Duration

	mu     sync.Mutex
	w      *translog.Writer // replaced when an aborted handoff resumes
	src    *relocation.Source
	target string // allocation the shard was handed off to
	// targetNode is the node StartHandoff named for the target ("" when
	// it named none).
	targetNode string
	state      ShardState
	ackedGen   int64 // last generation whose ops were acknowledged
	nextSeq    int64 // sequence number after the last acknowledged op
	casSeq     int64 // writer's CAS count seen at the last acknowledgement
	lastCAS    time.Time
	// proof is a steady time no later than when the last successful fence
	// CAS was sent: the start of the Append whose ack first saw it.
	proof seal.Proof
	// checkpoints are the checkpoints published here (without their
	// files): a Read from at or after one starts after its generation,
	// which GC may have collected below.
	checkpoints []seal.Manifest
	fenceErr    error
	// warm serves the checkpoint of a warm open (nil otherwise); set by
	// installWarm. replaying holds appends back until its replay ended.
	warm      *warmShard
	replaying bool
	// healthLogged is the store health last logged, at healthLoggedAt.
	healthLogged   string
	healthLoggedAt time.Time
	// observedLogged: the first observed fencing was logged.
	observedLogged bool
	// barriers shares fence key reads between concurrent read barriers.
	barriers barrierGroup
	// backlog is the replay backlog the checkpoint policy watches.
	backlog backlog
}

// install makes sh the shard the lifecycle opened: its writer, chain,
// restore point and lineage, the settings with the shard's stored
// fencing, and state open.
func (sh *shard) install(o *opened) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.chain, sh.restore, sh.startGen, sh.lineage = o.Chain, o.Restore, o.StartGen, o.Lineage
	sh.w = o.Writer
	sh.settings = sh.settings.withFencing(o.Fencing)
	sh.ackedGen, sh.nextSeq = o.Restore.Gen, o.Restore.NextSeqNo
	sh.backlog = backlog{ckptGen: o.Restore.CheckpointGen, ckptAt: time.Now()}
	sh.state = ShardOpen
}

// installWarm makes sh the shard a warm open opened: as install, without
// a writer until the replay ends (replayed), its checkpoint served by w.
func (sh *shard) installWarm(o *opened, w *warmShard) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.chain, sh.restore, sh.startGen, sh.lineage = o.Chain, o.Restore, o.StartGen, o.Lineage
	sh.settings = sh.settings.withFencing(o.Fencing)
	sh.ackedGen = o.Restore.Gen
	sh.warm, sh.replaying = w, true
	sh.backlog = backlog{ckptGen: o.Restore.CheckpointGen, ckptAt: time.Now()}
	sh.state = ShardOpen
}

// replayed ends a warm shard's replay: it takes the writer, or records
// why the replay failed (the shard then reports failed, or fenced). It
// reports false, having taken nothing, when the shard no longer opens
// (closing or replaced): the caller closes the writer.
func (sh *shard) replayed(r replayed) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.state != ShardOpen {
		return false
	}
	if r.Err != nil {
		if sh.fenceErr == nil {
			sh.fenceErr = r.Err
		}
		return true
	}
	sh.w, sh.replaying = r.Writer, false
	sh.restore.NextSeqNo, sh.nextSeq = r.NextSeqNo, r.NextSeqNo
	return true
}

// warmShard is the shard's warm serving, nil for a full open.
func (sh *shard) warmShard() *warmShard {
	if sh == nil {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.warm
}

// isReplaying reports whether a warm open's replay is still running (or
// failed: then no writer ever comes).
func (sh *shard) isReplaying() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.replaying
}

// lifecycle returns the shard's lifecycle state and its handoff target.
func (sh *shard) lifecycle() (ShardState, string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.state, sh.target
}

// setState moves the shard to state, naming the handoff target.
func (sh *shard) setState(state ShardState, target string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.state, sh.target = state, target
}

// targetNodeName is the node of the handoff's target, if it was named.
func (sh *shard) targetNodeName() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.targetNode
}

// ShardStatus is what Status reports of a shard.
type ShardStatus struct {
	Shard         string
	Term          int64
	Allocation    string
	Owner         string
	Gen           int64
	NextSeqNo     int64
	LastCASAge    time.Duration // -1 when no CAS was seen yet
	Fenced        bool
	SuccessorTerm int64
	State         ShardState
	Err           string
	Settings      Settings
	Stats         translog.Stats
	Restore       RestorePoint

	// StoreHealth is HealthOK, HealthRetrying or HealthStalled.
	StoreHealth string
	// LastStoreError is the last store error a sync retried ("" if none),
	// LastStoreErrorAge how long ago (-1 if none).
	LastStoreError    string
	LastStoreErrorAge time.Duration
	// RetryingFor is how long syncs have been retrying store errors.
	RetryingFor time.Duration
	// WaitingFor is how long the oldest store request of a sync in
	// flight has gone unanswered (0 when none is in flight).
	WaitingFor time.Duration
	// LastSyncAge is the time since the last acknowledged sync; -1 before
	// the first.
	LastSyncAge  time.Duration
	StoreRetries int64

	// Warm is what warm serving reports (zero for a full open); Replaying
	// holds appends back.
	Warm      WarmStats
	Replaying bool

	// ReplayBacklogBytes and ReplayBacklogGens are the translog after the
	// newest checkpoint on the lineage (CheckpointGen, 0: none), which a
	// takeover replays; CheckpointAge is the time since that checkpoint
	// was restored or published here (-1: never); CheckpointRequestedGen
	// the generation a pending checkpoint request asks to cover (0: none).
	ReplayBacklogBytes, ReplayBacklogGens int64
	CheckpointGen                         int64
	CheckpointAge                         time.Duration
	CheckpointRequestedGen                int64

	// FencingObserved is, in observe mode, the first refused fence CAS:
	// per-sync fencing would have failed every append acknowledged since
	// (Stats.FencingObserved counts their syncs). Empty when none.
	FencingObserved string
}

func (sh *shard) status() ShardStatus {
	sh.mu.Lock()
	st := ShardStatus{
		Shard: sh.name, Term: sh.term, Allocation: sh.alloc, Gen: sh.ackedGen, NextSeqNo: sh.nextSeq,
		LastCASAge: -1, State: sh.state, Settings: sh.settings, Restore: sh.restore,
		StoreHealth: HealthOK, LastStoreErrorAge: -1, LastSyncAge: -1,
	}
	if !sh.lastCAS.IsZero() {
		st.LastCASAge = time.Since(sh.lastCAS)
	}
	fenceErr, chain, w, warm := sh.fenceErr, sh.chain, sh.w, sh.warm
	st.Replaying = sh.replaying && sh.fenceErr == nil
	st.ReplayBacklogBytes, st.ReplayBacklogGens = sh.backlog.size(sh.ackedGen)
	st.CheckpointGen, st.CheckpointRequestedGen, st.CheckpointAge = sh.backlog.ckptGen, sh.backlog.reqGen, -1
	if !sh.backlog.ckptAt.IsZero() {
		st.CheckpointAge = time.Since(sh.backlog.ckptAt)
	}
	sh.mu.Unlock()
	if warm != nil {
		st.Warm = warm.stats()
	}
	if chain != nil {
		st.Owner = chain.State().Record.Allocation
	} else if w != nil {
		st.Owner = sh.alloc
	}
	if w != nil {
		st.Stats = w.Stats()
		if err := w.ObservedFencing(); err != nil {
			st.FencingObserved = translog.ObservedVerdict(err)
		}
		fillHealth(&st, w.StoreHealth(), sh.stallAfter, time.Now())
		if err := w.Err(); err != nil && fenceErr == nil && st.State == ShardOpen {
			fenceErr = err
		}
	}
	if fenceErr != nil {
		st.Err = fenceErr.Error()
		if errors.Is(fenceErr, fence.ErrFenced) {
			st.Fenced = true
			st.SuccessorTerm, _ = fence.SuccessorTerm(fenceErr)
			if st.State == ShardOpen {
				st.State = ShardFenced
			}
		} else if st.State == ShardOpen {
			st.State = ShardFailed
		}
	}
	return st
}

// history is what Read may read of the shard: the lineage it inherited,
// then its own generations up to the last acknowledged one.
func (sh *shard) history() seal.History {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return seal.History{
		Lineage: sh.lineage, RestoreGen: sh.restore.Gen, RestoreNextSeqNo: sh.restore.NextSeqNo,
		Term: sh.term, StartGen: sh.startGen, AckedGen: sh.ackedGen, Checkpoints: sh.checkpoints,
	}
}

func (sh *shard) writer() *translog.Writer {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.w
}

// acked records an acknowledgement: acks come in generation order, so the
// highest acked generation says every lower one of the term is durable.
func (sh *shard) acked(ack translog.Ack, sentBy int64) {
	// The writer's CAS count, not the chain's state: the chain holds its
	// lock across the next CAS round trip, and waiting for it here would
	// hold every ack back by one sync.
	var cas, bytes int64
	sh.mu.Lock()
	w, fenced := sh.w, sh.chain != nil
	sh.mu.Unlock()
	if w != nil {
		st := w.Stats()
		bytes = st.Bytes
		if fenced {
			cas = st.CASWrites
		}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.backlog.acked(ack.Gen, bytes)
	sh.ackedGen = max(sh.ackedGen, ack.Gen)
	sh.nextSeq = max(sh.nextSeq, ack.FirstSeqNo+int64(ack.Count))
	if cas > sh.casSeq {
		sh.casSeq = cas
		sh.lastCAS = time.Now()
		// In lease mode an ack may come without a CAS, so only per-sync
		// acks prove a CAS sent after the append began.
		if cas > 0 && sh.settings.Mode == translog.PerSync && (!sh.proof.Valid || sentBy > sh.proof.At) {
			sh.proof = seal.Proof{At: sentBy, Valid: true}
		}
	}
}

// failed records a writer failure once; it reports whether this call was
// the first to see it.
func (sh *shard) failed(err error) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.fenceErr != nil {
		return false
	}
	sh.fenceErr = err
	return true
}

func (sh *shard) logAttrs() []any {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return []any{"shard", sh.name, "term", sh.term, "allocation", sh.alloc, "gen", sh.ackedGen}
}

// Status reports the shard's term, owner, generation and fencing state.
func (s *Server) Status(name string) (ShardStatus, error) {
	if err := ValidateShardID(name); err != nil {
		return ShardStatus{}, opErr("Status", name, err, "")
	}
	sh := s.reg.lookup(name)
	if sh == nil {
		return ShardStatus{}, opErr("Status", name, ErrShardNotOpen, s.notOpenHint())
	}
	return sh.status(), nil
}

// Shards lists the status of every shard on this sidecar.
func (s *Server) Shards() []ShardStatus {
	var out []ShardStatus
	for _, sh := range s.reg.all() {
		out = append(out, sh.status())
	}
	return out
}
