package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/relocation"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Limits bound what one request may carry, so a bad client cannot make the
// sidecar buffer without bound.
type Limits struct {
	// MaxOpBytes bounds one op. Default 1 MiB.
	MaxOpBytes int
	// MaxOpsPerAppend bounds the ops of one Append. Default 10,000.
	MaxOpsPerAppend int
	// MaxRequestBytes bounds a request message on the wire. Default 32 MiB.
	MaxRequestBytes int
	// MaxConcurrentRequestBytes bounds the request bytes all calls hold at
	// once (decoded, a request takes about twice its size in memory).
	// Default 128 MiB; at least MaxRequestBytes.
	MaxConcurrentRequestBytes int64
	// BodyReadTimeout bounds how long a request body may take to arrive.
	// Default 30s.
	BodyReadTimeout time.Duration
}

// Bounds of Limits.BodyReadTimeout.
const (
	MinBodyReadTimeout = 100 * time.Millisecond
	MaxBodyReadTimeout = 10 * time.Minute
)

func (l *Limits) setDefaults() {
	if l.MaxOpBytes <= 0 {
		l.MaxOpBytes = 1 << 20
	}
	if l.MaxOpsPerAppend <= 0 {
		l.MaxOpsPerAppend = 10000
	}
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = 32 << 20
	}
	if l.MaxConcurrentRequestBytes <= 0 {
		l.MaxConcurrentRequestBytes = max(128<<20, int64(l.MaxRequestBytes))
	}
	if l.BodyReadTimeout <= 0 {
		l.BodyReadTimeout = 30 * time.Second
	}
}

func (l Limits) validate() error {
	switch {
	case l.MaxConcurrentRequestBytes < int64(l.MaxRequestBytes):
		return fmt.Errorf("%w: max concurrent request bytes %d below max request bytes %d", ErrInvalidArgument, l.MaxConcurrentRequestBytes, l.MaxRequestBytes)
	case l.BodyReadTimeout < MinBodyReadTimeout || l.BodyReadTimeout > MaxBodyReadTimeout:
		return fmt.Errorf("%w: body read timeout %v is outside %v..%v", ErrInvalidArgument, l.BodyReadTimeout, MinBodyReadTimeout, MaxBodyReadTimeout)
	}
	return nil
}

// Options configure a Server.
type Options struct {
	// Node names this sidecar in fence records, for operators.
	Node string
	// Defaults are the settings of a shard whose Open leaves them zero;
	// zero fields take DefaultSettings.
	Defaults Settings
	Limits   Limits
	// AllowUnfenced lets Open disable fencing (benchmarks), and lets the
	// sidecar start on a store that does not enforce preconditions, where
	// it then serves unfenced shards only.
	AllowUnfenced bool
	Logger        *slog.Logger
	// Registerer receives the service's and the store's metrics; nil
	// registers nothing.
	Registerer prometheus.Registerer
	// StoreLabel is the store label of the store request metrics.
	// Default "shards".
	StoreLabel string
	// StallAfter is how long a shard's syncs may retry store errors before
	// it counts as stalled (Status, /readyz, metrics, an ERROR log line).
	// Default 10s; MinStallAfter..MaxStallAfter.
	StallAfter time.Duration
}

// Server holds the shards open on one sidecar. Its methods are the API;
// Handler serves them.
type Server struct {
	store   *blobstore.Container
	opts    Options
	opener  shardOpener
	log     *slog.Logger
	metrics *metrics
	// probeErr is why the store cannot take fenced writes (nil: it can).
	probeErr error
	// clock stamps ownership proofs; GC and checkpoints read it too, so
	// their freshness checks compare times of one steady clock.
	clock fence.Clock

	// stopped is closed by Shutdown; the health watcher ends with it.
	stopped  chan struct{}
	stopOnce sync.Once

	mu       sync.Mutex
	shards   map[string]*shard
	draining bool

	// watch tells watchers (the primary) what this sidecar gained, lost
	// or was fenced from.
	watch *watchHub
}

// New probes store for enforced preconditions and returns a server for
// it. A store that ignores preconditions is refused unless AllowUnfenced,
// and then only unfenced shards open on it.
func New(ctx context.Context, store *blobstore.Container, opts Options) (*Server, error) {
	return newServer(ctx, store, opts, defaultOpener())
}

func newServer(ctx context.Context, store *blobstore.Container, opts Options, op shardOpener) (*Server, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: no store", ErrInvalidArgument)
	}
	opts, err := opts.normalized()
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// No client input makes a log line large, whatever it is quoted in.
	opts.Logger = slog.New(clipHandler{opts.Logger.Handler()})
	if opts.StoreLabel == "" {
		opts.StoreLabel = "shards"
	}
	s := &Server{opts: opts, opener: op, log: opts.Logger, shards: map[string]*shard{}, clock: fence.SystemClock(), stopped: make(chan struct{})}
	s.watch = newWatchHub(s)
	if opts.Registerer != nil {
		m := metered.New(store, opts.StoreLabel)
		opts.Registerer.MustRegister(m)
		store = m.Container
	}
	s.store = store
	if err := blobstore.ProbePreconditions(ctx, store); err != nil {
		if !errors.Is(err, blobstore.ErrPreconditionsNotEnforced) {
			return nil, fmt.Errorf("sidecar start-up: the precondition probe could not run on %s: %w (check the store URL and that the store is reachable)", store, err)
		}
		if !opts.AllowUnfenced {
			return nil, fmt.Errorf("sidecar start-up: %w (refusing to serve fenced shards; only --allow-unfenced runs on such a store, without any fencing)", err)
		}
		s.probeErr = err
		s.log.Warn("store does not enforce preconditions: serving unfenced shards only", "store", store.String(), "error", err.Error())
	}
	s.metrics = newMetrics(opts.Registerer, s)
	go s.watchHealth(context.WithoutCancel(ctx))
	return s, nil
}

// Validate reports the first option outside its range (ErrInvalidArgument),
// without touching any store: serve checks its flags with it first.
func (o Options) Validate() error {
	_, err := o.normalized()
	return err
}

// normalized fills the defaults of o and checks every range.
func (o Options) normalized() (Options, error) {
	if err := validateName("node", o.Node, true); err != nil {
		return o, err
	}
	o.Limits.setDefaults()
	if err := o.Limits.validate(); err != nil {
		return o, err
	}
	if o.StallAfter == 0 {
		o.StallAfter = DefaultStallAfter
	}
	if o.StallAfter < MinStallAfter || o.StallAfter > MaxStallAfter {
		return o, fmt.Errorf("%w: stall-after %v is outside %v..%v", ErrInvalidArgument, o.StallAfter, MinStallAfter, MaxStallAfter)
	}
	o.Defaults = mergeSettings(DefaultSettings(), o.Defaults)
	if err := o.Defaults.Validate(); err != nil {
		return o, fmt.Errorf("default shard settings: %w", err)
	}
	return o, nil
}

// mergeSettings fills the zero fields of req from def.
func mergeSettings(def, req Settings) Settings {
	out := req
	if out.Mode == translog.PerSync && !req.modeSet {
		out.Mode = def.Mode
	}
	if out.AckOrder == translog.Concurrent && !req.ackOrderSet {
		out.AckOrder = def.AckOrder
	}
	out.modeSet, out.ackOrderSet = false, false
	if out.InlineLimit == 0 {
		out.InlineLimit = def.InlineLimit
	}
	if out.MaxSyncBytes == 0 {
		out.MaxSyncBytes = def.MaxSyncBytes
	}
	if out.MaxInFlightBytes == 0 {
		out.MaxInFlightBytes = def.MaxInFlightBytes
	}
	if out.MaxPipeline == 0 {
		out.MaxPipeline = def.MaxPipeline
	}
	if out.MaxGatherDelay == 0 {
		out.MaxGatherDelay = def.MaxGatherDelay
	}
	if out.LeaseInterval == 0 {
		out.LeaseInterval = def.LeaseInterval
	}
	if out.FreshnessInterval == 0 {
		out.FreshnessInterval = def.FreshnessInterval
	}
	if out.RetentionGens == 0 {
		out.RetentionGens = def.RetentionGens
	}
	return out
}

// Store is the container the server writes to (metered when a Registerer
// was given).
func (s *Server) Store() *blobstore.Container { return s.store }

// Ready reports whether the server takes opens and appends.
func (s *Server) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return ErrShuttingDown
	}
	return nil
}

// Shard states, as Status reports them.
const (
	stateOpening = "opening"
	stateOpen    = "open"
	stateFenced  = "fenced"
	stateFailed  = "failed"
	stateClosing = "closing"
)

// shard is one shard open (or opening) on this sidecar.
type shard struct {
	name     string
	store    *blobstore.Container
	term     int64
	alloc    string
	settings Settings
	chain    *fence.Chain
	restore  RestorePoint
	startGen int64
	lineage  func(ctx context.Context, fn func(translog.Batch) error) error
	opened   time.Time
	// stallAfter is the server's Options.StallAfter.
	stallAfter time.Duration

	mu       sync.Mutex
	w        *translog.Writer // replaced when an aborted handoff resumes
	src      *relocation.Source
	target   string // allocation the shard was handed off to
	state    string
	ackedGen int64 // last generation whose ops were acknowledged
	nextSeq  int64 // sequence number after the last acknowledged op
	casSeq   int64 // writer's CAS count seen at the last acknowledgement
	lastCAS  time.Time
	// proof is a steady time no later than when the last successful fence
	// CAS was sent: the start of the Append whose ack first saw it.
	proof seal.Proof
	// checkpoints are (gen, next seq) of checkpoints published here: a
	// Read from at or after one starts after its generation, which GC may
	// have collected below.
	checkpoints [][2]int64
	fenceErr    error
	// healthLogged is the store health last logged, at healthLoggedAt.
	healthLogged   string
	healthLoggedAt time.Time
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
	State         string
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
	// LastSyncAge is the time since the last acknowledged sync; -1 before
	// the first.
	LastSyncAge  time.Duration
	StoreRetries int64
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
	fenceErr, chain := sh.fenceErr, sh.chain
	sh.mu.Unlock()
	if chain != nil {
		st.Owner = chain.State().Record.Allocation
	} else if sh.writer() != nil {
		st.Owner = sh.alloc
	}
	if w := sh.writer(); w != nil {
		st.Stats = w.Stats()
		fillHealth(&st, w.StoreHealth(), sh.stallAfter, time.Now())
		if err := w.Err(); err != nil && fenceErr == nil && st.State == stateOpen {
			fenceErr = err
		}
	}
	if fenceErr != nil {
		st.Err = fenceErr.Error()
		if errors.Is(fenceErr, fence.ErrFenced) {
			st.Fenced = true
			st.SuccessorTerm, _ = fence.SuccessorTerm(fenceErr)
			if st.State == stateOpen {
				st.State = stateFenced
			}
		} else if st.State == stateOpen {
			st.State = stateFailed
		}
	}
	return st
}

func (sh *shard) writer() *translog.Writer {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.w
}

func (sh *shard) writerOrNil() *translog.Writer {
	if sh == nil {
		return nil
	}
	return sh.writer()
}

// acked records an acknowledgement: acks come in generation order, so the
// highest acked generation says every lower one of the term is durable.
func (sh *shard) acked(ack translog.Ack, sentBy int64) {
	// The writer's CAS count, not the chain's state: the chain holds its
	// lock across the next CAS round trip, and waiting for it here would
	// hold every ack back by one sync.
	var cas int64
	w := sh.writer()
	if sh.chain != nil && w != nil {
		cas = w.Stats().CASWrites
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.ackedGen = max(sh.ackedGen, ack.Gen)
	sh.nextSeq = max(sh.nextSeq, ack.FirstSeqNo+int64(ack.Count))
	if cas > sh.casSeq || sh.lastCAS.IsZero() {
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

func (s *Server) snapshot() []*shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*shard, 0, len(s.shards))
	for _, sh := range s.shards {
		out = append(out, sh)
	}
	return out
}

// get returns the open shard name.
func (s *Server) get(op, name string) (*shard, error) {
	if err := ValidateShardID(name); err != nil {
		return nil, opErr(op, name, err, "")
	}
	s.mu.Lock()
	sh := s.shards[name]
	s.mu.Unlock()
	if sh == nil {
		return nil, opErr(op, name, ErrShardNotOpen, "open it first with Open(shard, term, allocation)")
	}
	sh.mu.Lock()
	state := sh.state
	sh.mu.Unlock()
	if state == stateOpening || state == stateClosing {
		return nil, opErr(op, name, ErrShardBusy, "retry when Open or Close returned")
	}
	return sh, nil
}

// shardStore is the shard's view of the store: every key under <shard>/.
func (s *Server) shardStore(name string) (*blobstore.Container, error) {
	return blobstore.Sub(s.store, name)
}

// Open claims, seals and restores the shard and opens it for appends;
// events receive the restore as it happens.
func (s *Server) Open(ctx context.Context, name string, term int64, alloc string, req Settings, events func(openEvent) error) (ShardStatus, error) {
	const op = "Open"
	// An Open retried on a failing store is answered with the store's
	// error before the caller's deadline; retrying it is safe.
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	res, err := s.open(ctx, name, term, alloc, req, s.watch.tee(name, term, alloc, events))
	s.watch.opened(name, term, alloc, res, err)
	if err != nil {
		s.metrics.opens.WithLabelValues(reasonLabel(err)).Inc()
		s.log.Warn("open failed", "shard", name, "term", term, "allocation", alloc, "error", err.Error())
		var e *Error
		if !errors.As(err, &e) {
			err = opErr(op, name, err, openHint(err, term))
		}
		return ShardStatus{}, err
	}
	s.metrics.opens.WithLabelValues("ok").Inc()
	return res, nil
}

func (s *Server) open(ctx context.Context, name string, term int64, alloc string, req Settings, events func(openEvent) error) (ShardStatus, error) {
	const op = "Open"
	if err := ValidateShardID(name); err != nil {
		return ShardStatus{}, opErr(op, name, err, "")
	}
	if term < 1 || term > MaxTerm {
		return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: term %d is outside 1..%d", ErrInvalidArgument, term, int64(MaxTerm)), "")
	}
	if err := validateName("allocation", alloc, false); err != nil {
		return ShardStatus{}, opErr(op, name, err, "")
	}
	settings := mergeSettings(s.opts.Defaults, req)
	if err := settings.Validate(); err != nil {
		return ShardStatus{}, opErr(op, name, err, "")
	}
	if settings.FencingDisabled && !s.opts.AllowUnfenced {
		return ShardStatus{}, opErr(op, name, ErrUnfencedRefused, "start the sidecar with --allow-unfenced, for benchmarks only")
	}
	if !settings.FencingDisabled && s.probeErr != nil {
		return ShardStatus{}, opErr(op, name, s.probeErr, "use a store that enforces conditional writes")
	}
	store, err := s.shardStore(name)
	if err != nil {
		return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: %w", ErrInvalidArgument, err), "")
	}

	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return ShardStatus{}, opErr(op, name, ErrShuttingDown, "open the shard on another sidecar")
	}
	prev := s.shards[name]
	if prev != nil {
		st := prev.status()
		switch {
		case st.State == stateOpening || st.State == stateClosing:
			s.mu.Unlock()
			return ShardStatus{}, opErr(op, name, ErrShardBusy, "retry when the other Open or Close returned")
		case st.State == stateOpen && prev.term == term && prev.alloc == alloc:
			s.mu.Unlock()
			// The fencing fields are the shard's, whatever this call asked.
			if want := settings.withFencing(seal.FencingOf(prev.settings.WriterOptions())); prev.settings != want {
				return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: the shard is open at term %d with other settings: %s", ErrInvalidArgument, term, prev.settings.diff(want)), "settings are fixed when a shard opens; open a new term to change them")
			}
			// A retried Open of what is already open: answer it again.
			return st, nil
		case prev.term > term:
			s.mu.Unlock()
			return ShardStatus{}, opErr(op, name, fmt.Errorf("%w: open here at term %d, above %d", ErrWrongTerm, prev.term, term), "a lower term cannot take the shard back")
		}
	}
	sh := &shard{name: name, store: store, term: term, alloc: alloc, settings: settings, state: stateOpening, stallAfter: s.opts.StallAfter}
	s.shards[name] = sh
	s.mu.Unlock()

	restoreFail := func(err error) (ShardStatus, error) {
		s.mu.Lock()
		if s.shards[name] == sh {
			if prev != nil {
				s.shards[name] = prev
			} else {
				delete(s.shards, name)
			}
		}
		s.mu.Unlock()
		return ShardStatus{}, err
	}
	start := time.Now()
	s.log.Info("opening shard", "shard", name, "term", term, "allocation", alloc, "mode", settings.Mode.String(),
		"ack_order", settings.AckOrder.String(), "fencing", !settings.FencingDisabled)
	o, err := s.opener.Open(ctx, store, openParams{Shard: name, Term: term, Allocation: alloc, Node: s.opts.Node, Settings: settings},
		func(ev openEvent) error {
			switch {
			case ev.File != nil:
				s.metrics.hydration.Add(float64(len(ev.File.Data)))
			case ev.Ops != nil:
				for _, o := range ev.Ops.Ops {
					s.metrics.hydration.Add(float64(len(o)))
				}
			}
			if events == nil {
				return nil
			}
			return events(ev)
		})
	if err != nil {
		return restoreFail(err)
	}
	sh.mu.Lock()
	// Under the lock: Status may read the shard while it opens.
	sh.chain, sh.restore, sh.startGen, sh.lineage = o.Chain, o.Restore, o.StartGen, o.ReadLineage
	sh.opened = time.Now()
	sh.w = o.Writer
	sh.settings = settings.withFencing(o.Fencing)
	sh.ackedGen, sh.nextSeq = o.Restore.Gen, o.Restore.NextSeqNo
	sh.state = stateOpen
	sh.mu.Unlock()
	if sh.settings != settings {
		s.log.Info("shard runs its stored fencing, not the requested", "shard", name, "term", term,
			"fencing", o.Fencing.String(), "requested", seal.FencingOf(settings.WriterOptions()).String())
	}

	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		_ = o.Writer.Close(context.WithoutCancel(ctx))
		return restoreFail(opErr(op, name, ErrShuttingDown, "open the shard on another sidecar"))
	}
	if pw := prev.writerOrNil(); pw != nil {
		// The claim fenced the previous term's writer; close it so its
		// pending appends are answered.
		go func() { _ = pw.Close(context.Background()) }()
	}
	s.log.Info("shard open", append(sh.logAttrs(), "restore_term", o.Restore.Term, "restore_gen", o.Restore.Gen,
		"start_gen", o.StartGen, "duration_ms", time.Since(start).Milliseconds())...)
	return sh.status(), nil
}

// Append appends ops and returns once they are durable and fenced.
func (s *Server) Append(ctx context.Context, name string, ops [][]byte, expectedTerm int64) (translog.Ack, error) {
	ack, err := s.append(ctx, name, ops, expectedTerm)
	if err != nil {
		s.metrics.appends.WithLabelValues(reasonLabel(err)).Inc()
		return ack, err
	}
	s.metrics.appends.WithLabelValues("ok").Inc()
	s.metrics.ackedOps.Add(float64(ack.Count))
	return ack, nil
}

func (s *Server) append(ctx context.Context, name string, ops [][]byte, expectedTerm int64) (translog.Ack, error) {
	const op = "Append"
	sh, err := s.get(op, name)
	if err != nil {
		return translog.Ack{}, err
	}
	if len(ops) == 0 {
		return translog.Ack{}, opErr(op, name, fmt.Errorf("%w: no ops", ErrInvalidArgument), "send at least one op")
	}
	if len(ops) > s.opts.Limits.MaxOpsPerAppend {
		return translog.Ack{}, opErr(op, name, fmt.Errorf("%w: %d ops in one append, the limit is %d", ErrInvalidArgument, len(ops), s.opts.Limits.MaxOpsPerAppend), "split the append")
	}
	for i, o := range ops {
		if len(o) > s.opts.Limits.MaxOpBytes {
			return translog.Ack{}, opErr(op, name, fmt.Errorf("%w: op %d is %d bytes, the limit is %d", blobstore.ErrTooLarge, i, len(o), s.opts.Limits.MaxOpBytes), "split the op or raise --max-op-bytes")
		}
	}
	sh.mu.Lock()
	state, target := sh.state, sh.target
	sh.mu.Unlock()
	switch state {
	case stateHandedOff:
		return translog.Ack{}, opErr(op, name, fmt.Errorf("%w: the shard moved to allocation %q", fence.ErrHandedOff, target), "append on the relocation target")
	case stateHandingOff:
		return translog.Ack{}, opErr(op, name, fmt.Errorf("%w to allocation %q", ErrHandingOff, target), "not acknowledged; retry on the target once it adopted the shard")
	}
	if expectedTerm != 0 && expectedTerm != sh.term {
		return translog.Ack{}, opErr(op, name, fmt.Errorf("%w: open at term %d, the caller expects %d", ErrWrongTerm, sh.term, expectedTerm), "reopen the shard at the caller's term")
	}
	if err := s.Ready(); err != nil {
		return translog.Ack{}, opErr(op, name, err, "nothing was written; append on the shard's next primary")
	}
	start, sent := time.Now(), s.clock.Now()
	w := sh.writer()
	actx, stop := cutOnStoreFault(ctx, w)
	ack, err := w.Append(actx, ops)
	stop()
	if err != nil {
		sh.mu.Lock()
		state, target = sh.state, sh.target
		sh.mu.Unlock()
		if errors.Is(err, translog.ErrClosed) && (state == stateHandingOff || state == stateHandedOff) {
			// The handoff drained the writer under this append.
			return translog.Ack{}, opErr(op, name, fmt.Errorf("%w to allocation %q: %w", ErrHandingOff, target, err), "not acknowledged; retry on the target once it adopted the shard")
		}
		s.noteFailure(sh, err)
		if ferr := storeFault(actx, w, err); ferr != err {
			return translog.Ack{}, opErr(op, name, ferr, "the store is failing, see the shard's store health in status; retry the append once it takes writes again")
		}
		return translog.Ack{}, opErr(op, name, err, hintFor(err))
	}
	s.metrics.ackLatency.Observe(time.Since(start).Seconds())
	sh.acked(ack, sent)
	return ack, nil
}

// noteFailure logs and counts a writer's terminal failure once.
func (s *Server) noteFailure(sh *shard, err error) {
	werr := sh.writer().Err()
	if werr == nil || !sh.failed(werr) {
		return
	}
	if errors.Is(werr, fence.ErrFenced) {
		s.metrics.fenced.Inc()
		succ, _ := fence.SuccessorTerm(werr)
		s.log.Warn("shard fenced", append(sh.logAttrs(), "successor_term", succ, "error", werr.Error())...)
		return
	}
	s.log.Error("shard writer failed", append(sh.logAttrs(), "error", werr.Error())...)
}

// Read calls fn with the batches of the shard's lineage from fromSeq on, up
// to the last acknowledged generation when Read started; batches are
// trimmed to fromSeq and to maxOps ops in all (0: no bound).
func (s *Server) Read(ctx context.Context, name string, fromSeq, maxOps int64, fn func(translog.Batch) error) error {
	const op = "Read"
	if fromSeq < 0 || maxOps < 0 {
		return opErr(op, name, fmt.Errorf("%w: from_seq %d, max_ops %d", ErrInvalidArgument, fromSeq, maxOps), "")
	}
	sh, err := s.get(op, name)
	if err != nil {
		return err
	}
	sh.mu.Lock()
	upTo := sh.ackedGen
	first := sh.startGen
	for _, c := range sh.checkpoints {
		if c[1] <= fromSeq {
			first = max(first, c[0]+1)
		}
	}
	sh.mu.Unlock()
	sent := int64(0)
	errEnough := errors.New("enough")
	emit := func(b translog.Batch) error {
		end := b.FirstSeqNo + int64(len(b.Ops))
		if end <= fromSeq {
			return nil
		}
		if skip := fromSeq - b.FirstSeqNo; skip > 0 {
			b.Ops, b.FirstSeqNo = b.Ops[skip:], fromSeq
		}
		if maxOps > 0 && sent+int64(len(b.Ops)) > maxOps {
			b.Ops = b.Ops[:maxOps-sent]
		}
		sent += int64(len(b.Ops))
		if err := fn(b); err != nil {
			return err
		}
		if maxOps > 0 && sent >= maxOps {
			return errEnough
		}
		return nil
	}
	if fromSeq < sh.restore.NextSeqNo && sh.lineage != nil {
		if err := sh.lineage(ctx, emit); err != nil {
			if errors.Is(err, errEnough) {
				return nil
			}
			return opErr(op, name, err, hintFor(err))
		}
	}
	if upTo >= first {
		err := translog.NewReader(sh.store, name).Iterate(ctx, sh.term, first, upTo, emit)
		if err != nil && !errors.Is(err, errEnough) {
			return opErr(op, name, err, hintFor(err))
		}
	}
	return nil
}

// Status reports the shard's term, owner, generation and fencing state.
func (s *Server) Status(name string) (ShardStatus, error) {
	if err := ValidateShardID(name); err != nil {
		return ShardStatus{}, opErr("Status", name, err, "")
	}
	s.mu.Lock()
	sh := s.shards[name]
	s.mu.Unlock()
	if sh == nil {
		return ShardStatus{}, opErr("Status", name, ErrShardNotOpen, "open it first with Open(shard, term, allocation)")
	}
	return sh.status(), nil
}

// Shards lists the status of every shard on this sidecar.
func (s *Server) Shards() []ShardStatus {
	var out []ShardStatus
	for _, sh := range s.snapshot() {
		out = append(out, sh.status())
	}
	return out
}

// Close drains the shard's in-flight syncs, answers its pending appends
// and releases it on this sidecar. The term stays claimed and its writes
// may be in flight nowhere else, but it cannot be opened again: the next
// Open of the shard needs a higher term.
func (s *Server) Close(ctx context.Context, name string) (ShardStatus, error) {
	const op = "Close"
	sh, err := s.get(op, name)
	if err != nil {
		return ShardStatus{}, err
	}
	sh.mu.Lock()
	sh.state = stateClosing
	sh.mu.Unlock()
	cerr := sh.writer().Close(ctx)
	st := sh.status()
	s.mu.Lock()
	if s.shards[name] == sh {
		delete(s.shards, name)
	}
	s.mu.Unlock()
	st.State = "closed"
	s.log.Info("shard closed", sh.logAttrs()...)
	if cerr != nil {
		return st, opErr(op, name, cerr, "syncs in progress were abandoned; their appends were not acknowledged")
	}
	return st, nil
}

// Shutdown stops taking opens and appends, syncs what every writer has
// queued, answers every pending caller and closes the writers. Nothing
// acknowledged is lost: an ack is only ever sent after its sync landed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopped) })
	s.mu.Lock()
	s.draining = true
	shards := make([]*shard, 0, len(s.shards))
	for _, sh := range s.shards {
		shards = append(shards, sh)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(shards))
	for i, sh := range shards {
		w := sh.writer()
		if w == nil {
			continue
		}
		wg.Go(func() {
			if err := w.Close(ctx); err != nil {
				errs[i] = fmt.Errorf("shard %q: %w", sh.name, err)
			}
		})
	}
	wg.Wait()
	s.log.Info("sidecar drained", "shards", len(shards))
	return errors.Join(errs...)
}

func reasonLabel(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	if r := Reason(err); r != "" {
		return r
	}
	return "internal"
}

// openHint says what a caller does next about a failed Open of term: a
// refused Open never means a successor took writes from this caller, only
// that this term cannot be (re)opened.
func openHint(err error, term int64) string {
	switch {
	case errors.Is(err, seal.ErrTermAlreadyOpen):
		return fmt.Sprintf("term %d already wrote and cannot be reopened: open the shard at a higher term", term)
	case errors.Is(err, fence.ErrFenced):
		if succ, ok := fence.SuccessorTerm(err); ok && succ >= MaxTerm {
			return fmt.Sprintf("term %d, the highest term there is, holds the shard: it can no longer fail over", succ)
		}
		if succ, ok := fence.SuccessorTerm(err); ok && succ > term {
			return fmt.Sprintf("term %d holds the shard: open it at a term above %d", succ, succ)
		}
		return fmt.Sprintf("term %d is claimed or sealed by another allocation: open the shard at a higher term", term)
	}
	return hintFor(err)
}

// hintFor says what a caller does next about an error from below.
func hintFor(err error) string {
	switch {
	case errors.Is(err, fence.ErrFenced):
		return "a successor holds the shard: stop writing here and send appends to the new primary"
	case errors.Is(err, translog.ErrClosed):
		return "not acknowledged; open the shard again or use its new primary"
	case errors.Is(err, ErrNotAvailable):
		return "use a build with the recovery path"
	}
	return ""
}
