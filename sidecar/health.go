package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/translog"
)

// Store health of a shard, as Status, /readyz and the metrics report it.
// Syncs retry store errors without end (giving up would leave a
// generation's outcome unknown), so during an outage appends simply wait:
// these states are how an operator sees it.
const (
	// HealthOK: no sync is retrying a store error.
	HealthOK = "ok"
	// HealthRetrying: syncs are retrying store errors, for less than
	// Options.StallAfter.
	HealthRetrying = "retrying"
	// HealthStalled: syncs have been retrying store errors for at least
	// Options.StallAfter, or a store request of a sync has gone that long
	// without an answer (a store that holds requests, as behind a network
	// partition that drops packets, fails none of them for a long while).
	// The shard acknowledges nothing until the store takes writes again,
	// and the sidecar answers /readyz with 503.
	HealthStalled = "stalled"
)

// Bounds of Options.StallAfter.
const (
	DefaultStallAfter = 10 * time.Second
	MinStallAfter     = time.Second
	MaxStallAfter     = 10 * time.Minute
)

// healthLogEvery bounds how often a shard's ongoing store trouble is
// logged again.
const healthLogEvery = 30 * time.Second

// storeHealthOf classifies what a writer saw of the store.
func storeHealthOf(h translog.StoreHealth, stallAfter time.Duration, now time.Time) string {
	switch {
	case h.Retrying() && now.Sub(h.RetryingSince) >= stallAfter, waitStalled(h, stallAfter, now):
		return HealthStalled
	case h.Retrying():
		return HealthRetrying
	}
	return HealthOK
}

// waitStalled reports whether a sync's store request has gone unanswered
// for stallAfter.
func waitStalled(h translog.StoreHealth, stallAfter time.Duration, now time.Time) bool {
	return !h.WaitingSince.IsZero() && now.Sub(h.WaitingSince) >= stallAfter
}

// fillHealth sets the store-health fields of st from the shard's writer.
func fillHealth(st *ShardStatus, h translog.StoreHealth, stallAfter time.Duration, now time.Time) {
	st.StoreHealth = storeHealthOf(h, stallAfter, now)
	st.StoreRetries = h.Retries
	st.LastStoreErrorAge, st.LastSyncAge = -1, -1
	if h.LastError != nil {
		st.LastStoreError = h.LastError.Error()
		st.LastStoreErrorAge = now.Sub(h.LastErrorAt)
	}
	if h.Retrying() {
		st.RetryingFor = now.Sub(h.RetryingSince)
	}
	if !h.WaitingSince.IsZero() {
		st.WaitingFor = now.Sub(h.WaitingSince)
	}
	if !h.LastSync.IsZero() {
		st.LastSyncAge = now.Sub(h.LastSync)
	}
}

// watchHealth logs each shard's store trouble: a WARN when its syncs start
// retrying store errors, an ERROR when they stall, an INFO when they
// recover, and the WARN or ERROR again at most every healthLogEvery while
// it lasts, until the server shuts down.
func (s *Server) watchHealth() {
	s.every(min(time.Second, s.opts.StallAfter/4), func(now time.Time) {
		for _, sh := range s.reg.all() {
			s.logHealth(sh, now)
		}
	})
}

func (s *Server) logHealth(sh *shard, now time.Time) {
	w := sh.writer()
	if w == nil {
		return
	}
	h := w.StoreHealth()
	state := storeHealthOf(h, s.opts.StallAfter, now)
	sh.mu.Lock()
	prev := sh.healthLogged
	if prev == "" {
		prev = HealthOK
	}
	again := state != HealthOK && now.Sub(sh.healthLoggedAt) >= healthLogEvery
	if state == prev && !again {
		sh.mu.Unlock()
		return
	}
	sh.healthLogged, sh.healthLoggedAt = state, now
	sh.mu.Unlock()
	attrs := append(sh.logAttrs(), "store_health", state, "store_retries", h.Retries)
	if h.LastError != nil {
		attrs = append(attrs, "last_store_error", h.LastError.Error())
	}
	if waitStalled(h, s.opts.StallAfter, now) {
		attrs = append(attrs, "unanswered_for", now.Sub(h.WaitingSince).Round(time.Millisecond).String())
	}
	switch state {
	case HealthStalled:
		if h.Retrying() {
			attrs = append(attrs, "retrying_for", now.Sub(h.RetryingSince).Round(time.Millisecond).String())
		}
		s.log.Error("shard stalled: every sync attempt fails on the store, or its requests go unanswered; appends wait and nothing is acknowledged until it takes writes again",
			attrs...)
	case HealthRetrying:
		s.log.Warn("store errors: the shard's syncs are retrying",
			append(attrs, "retrying_for", now.Sub(h.RetryingSince).Round(time.Millisecond).String())...)
	default:
		s.log.Info("store recovered: the shard's syncs land again", attrs...)
	}
}

// errFaultCut is the cause of an Append context the sidecar cut short
// because the shard's syncs were failing on the store as the caller's
// deadline came near.
var errFaultCut = errors.New("cut short by a store fault")

// cutOnStoreFault returns ctx, cancelled a little before its deadline (a
// tenth of the time left, at most a second) if the shard's syncs are then
// retrying store errors: the caller hears why its append is not
// acknowledged, before its own deadline leaves it with a bare "deadline
// exceeded". Without a store fault the append keeps its whole deadline.
func cutOnStoreFault(ctx context.Context, w *translog.Writer) (context.Context, context.CancelFunc) {
	d, margin, ok := deadlineMargin(ctx)
	if !ok {
		return ctx, func() {}
	}
	cctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(time.Until(d.Add(-margin)), func() {
		if w.StoreHealth().Retrying() {
			cancel(errFaultCut)
		}
	})
	return cctx, func() {
		t.Stop()
		cancel(nil)
	}
}

// deadlineMargin is how much earlier than its caller's deadline the
// sidecar gives up on a call: a tenth of the time left, at most a second.
func deadlineMargin(ctx context.Context) (time.Time, time.Duration, bool) {
	d, ok := ctx.Deadline()
	if !ok {
		return d, 0, false
	}
	m := min(time.Until(d)/10, time.Second)
	return d, m, m > 0
}

// answerBefore moves ctx's deadline earlier by deadlineMargin, so a call
// that runs out of time (an Open retrying a failing store) is answered with
// its cause while the caller still listens.
func answerBefore(ctx context.Context) (context.Context, context.CancelFunc) {
	d, m, ok := deadlineMargin(ctx)
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, d.Add(-m))
}

// storeFault turns the error of an Append cut short by cutOnStoreFault
// into ErrStoreFault naming the cause; other errors are returned as they
// are.
func storeFault(ctx context.Context, w *translog.Writer, err error) error {
	if !errors.Is(context.Cause(ctx), errFaultCut) {
		return err
	}
	h := w.StoreHealth()
	outcome := "nothing was written (the append waited for room behind the failing syncs)"
	if blobstore.IsAmbiguous(err) {
		outcome = "its outcome is unknown: its ops may still become durable once the store takes writes again"
	}
	since := "a while"
	if h.Retrying() {
		since = time.Since(h.RetryingSince).Round(time.Millisecond).String()
	}
	return fmt.Errorf("%w: the shard's syncs have failed on the store for %s (last error: %v); the append's deadline came before it was acknowledged, so %s",
		ErrStoreFault, since, h.LastError, outcome)
}

// ShardReadiness is one shard's part of /readyz.
type ShardReadiness struct {
	Shard       string     `json:"shard"`
	Term        int64      `json:"term"`
	State       ShardState `json:"state"`
	StoreHealth string     `json:"store_health"`
	// LastStoreError is the last store error a sync retried, if any.
	LastStoreError string `json:"last_store_error,omitempty"`
	RetryingMs     int64  `json:"retrying_ms"`
	// WaitingMs is how long the oldest store request of a sync in flight
	// has gone unanswered; 0 when none is in flight.
	WaitingMs int64 `json:"waiting_ms"`
	// LastSyncAgeMs is the time since the last acknowledged sync; -1
	// before the first.
	LastSyncAgeMs int64  `json:"last_sync_age_ms"`
	Ready         bool   `json:"ready"`
	Reason        string `json:"reason,omitempty"`
	// ReplayBacklogBytes is the translog a takeover would replay; Warning
	// says when it passed the policy's warning bound (still ready: the
	// shard works, a takeover just takes longer).
	ReplayBacklogBytes int64  `json:"replay_backlog_bytes"`
	Warning            string `json:"warning,omitempty"`
}

// Readiness is the body of /readyz.
type Readiness struct {
	Ready  bool             `json:"ready"`
	Reason string           `json:"reason,omitempty"`
	Shards []ShardReadiness `json:"shards"`
	// Warnings are the shards' warnings (a replay backlog past the
	// bound); they do not make the sidecar not ready.
	Warnings []string `json:"warnings,omitempty"`
}

func (s *Server) readinessOf(st ShardStatus) ShardReadiness {
	r := ShardReadiness{
		Shard: st.Shard, Term: st.Term, State: st.State, StoreHealth: st.StoreHealth, LastStoreError: clipN(st.LastStoreError, maxLogValue),
		RetryingMs: st.RetryingFor.Milliseconds(), WaitingMs: st.WaitingFor.Milliseconds(), LastSyncAgeMs: -1, Ready: true, ReplayBacklogBytes: st.ReplayBacklogBytes,
	}
	if w := s.opts.Checkpoint.WarnBytes; w > 0 && st.ReplayBacklogBytes > w {
		r.Warning = fmt.Sprintf("replay backlog of %d bytes (%d generations) past the %d bound: a takeover replays all of it; the primary is not answering checkpoint requests (Watch)", st.ReplayBacklogBytes, st.ReplayBacklogGens, w)
	}
	if st.LastSyncAge >= 0 {
		r.LastSyncAgeMs = st.LastSyncAge.Milliseconds()
	}
	switch {
	case st.State != ShardOpen:
		r.Ready, r.Reason = false, "shard is "+st.State.String()
	case st.StoreHealth == HealthStalled && st.RetryingFor >= s.opts.StallAfter:
		r.Ready, r.Reason = false, fmt.Sprintf("stalled: syncs have failed on the store for %v: %s", st.RetryingFor.Round(time.Millisecond), r.LastStoreError)
	case st.StoreHealth == HealthStalled:
		r.Ready, r.Reason = false, fmt.Sprintf("stalled: a sync's store request has gone unanswered for %v", st.WaitingFor.Round(time.Millisecond))
	}
	return r
}

// Readiness reports whether the sidecar takes opens and appends: not while
// it drains for shutdown, nor while any shard's syncs are stalled on store
// errors (the store all shards share is failing). With shard set it
// reports that shard alone; found is false when it is not open here.
func (s *Server) Readiness(shard string) (r Readiness, found bool) {
	if err := s.Ready(); err != nil {
		r.Reason = err.Error()
	}
	if shard != "" {
		st, err := s.Status(shard)
		if err != nil {
			return Readiness{Reason: err.Error(), Shards: []ShardReadiness{}}, false
		}
		sr := s.readinessOf(st)
		r.Shards = []ShardReadiness{sr}
		if sr.Warning != "" {
			r.Warnings = append(r.Warnings, "shard "+sr.Shard+": "+sr.Warning)
		}
		r.Ready = r.Reason == "" && sr.Ready
		if r.Reason == "" {
			r.Reason = sr.Reason
		}
		return r, true
	}
	r.Shards = []ShardReadiness{}
	var stalled []string
	for _, st := range s.Shards() {
		sr := s.readinessOf(st)
		r.Shards = append(r.Shards, sr)
		if sr.Warning != "" {
			r.Warnings = append(r.Warnings, "shard "+sr.Shard+": "+sr.Warning)
		}
		if st.StoreHealth == HealthStalled {
			stalled = append(stalled, fmt.Sprintf("shard %s %s", st.Shard, sr.Reason))
		}
	}
	if r.Reason == "" && len(stalled) > 0 {
		r.Reason = strings.Join(stalled, "; ")
	}
	r.Ready = r.Reason == ""
	return r, true
}

// serveReadyz answers /readyz: 200 when ready, 503 when not, 404 for
// ?shard=NAME when that shard is not open here. The body is one line of
// text, or the Readiness JSON with ?format=json or Accept: application/json.
func (s *Server) serveReadyz(w http.ResponseWriter, r *http.Request) {
	rd, found := s.Readiness(r.URL.Query().Get("shard"))
	code := http.StatusOK
	switch {
	case !found:
		code = http.StatusNotFound
	case !rd.Ready:
		code = http.StatusServiceUnavailable
	}
	if r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(rd)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	if rd.Ready {
		if len(rd.Warnings) > 0 {
			_, _ = fmt.Fprintln(w, "ready; warning: "+strings.Join(rd.Warnings, "; "))
			return
		}
		_, _ = fmt.Fprintln(w, "ready")
		return
	}
	_, _ = fmt.Fprintln(w, "not ready: "+rd.Reason)
}
