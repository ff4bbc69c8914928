package master

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shardfence/shardfence/internal/backoff"
	"github.com/shardfence/shardfence/internal/defaults"
	"github.com/shardfence/shardfence/internal/tick"
)

// ClientOffboardingJob is the terminal retirement of one client
// incarnation that went Offline. PrepareClientOffboarding commits Offline
// and isolates the incarnation at once (eligibility refuses its resources,
// Ping answers NEED_REMOUNT, mounts are barred); CompleteClientOffboarding
// does the expensive part and is retried until every step succeeded:
//
//  1. unmount every segment the incarnation mounted (metadata cleanup:
//     its replicas go, objects left without one are deleted; each unmount
//     is logged like a client's own);
//  2. if the client is a sidecar node: move every shard it held to a live
//     node at a higher term (auto-restore) or leave it unassigned with the
//     reason, durably, and cancel handoffs that targeted it;
//  3. the external cleanup hook (Options.ExternalCleanup), if any;
//  4. forget the record: only now may the client mount again, as a new
//     incarnation.
//
// Every step is idempotent and each change in it is logged as it is made,
// so a job can be retried, and a snapshot taken between two steps holds a
// state the log could also have reached; after a promotion the client is
// judged afresh (RestoreLiveness) and, if it stays silent, offboarded
// again by the new master.
type ClientOffboardingJob struct {
	Record   *ClientLivenessRecord
	Prepared SteadyTime

	// For the log: how long the client had been silent, and Suspected,
	// when the job was prepared.
	sinceSignal, suspectedFor time.Duration

	mu        sync.Mutex
	attempts  int
	lastErr   error
	notBefore time.Time
	done      bool
}

// Attempts is how many times Complete ran; Err the last failure.
func (j *ClientOffboardingJob) Attempts() (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.attempts, j.lastErr
}

// Done reports whether the job completed.
func (j *ClientOffboardingJob) Done() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.done
}

func (j *ClientOffboardingJob) describe() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.done:
		return "complete"
	case j.lastErr != nil:
		return fmt.Sprintf("attempt %d failed: %v", j.attempts, j.lastErr)
	case j.attempts == 0:
		return "queued"
	}
	return fmt.Sprintf("attempt %d", j.attempts)
}

// PrepareClientOffboarding commits r Offline, if it is still Suspected
// (a signal may have recovered it since the monitor judged it), and
// returns its job; nil when there is nothing to offboard. From here on
// the incarnation is isolated: ServingEligibility neither serves nor
// retains its resources, and it is a barrier to its client's mounts until
// the job completes.
func (m *Master) PrepareClientOffboarding(r *ClientLivenessRecord) *ClientOffboardingJob {
	now := m.clock.Steady()
	var j *ClientOffboardingJob
	m.live.t.GoOffline(r, now, func(sinceSignal, suspectedFor time.Duration) func() string {
		j = &ClientOffboardingJob{Record: r, Prepared: now, sinceSignal: sinceSignal, suspectedFor: suspectedFor}
		return j.describe
	})
	return j
}

// CompleteClientOffboarding runs the job's steps; see ClientOffboardingJob.
// A failure leaves the record Offline (still a barrier) and the job to be
// retried.
func (m *Master) CompleteClientOffboarding(ctx context.Context, j *ClientOffboardingJob) error {
	return m.completeOffboarding(ctx, []*ClientOffboardingJob{j})[0]
}

// completeOffboarding completes a batch of jobs: their segments are
// unmounted in one pass over the metadata, whatever their number.
func (m *Master) completeOffboarding(ctx context.Context, jobs []*ClientOffboardingJob) []error {
	errs := make([]error, len(jobs))
	owners := make(map[*ClientLivenessRecord]int, len(jobs))
	for i, j := range jobs {
		j.mu.Lock()
		j.attempts++
		j.mu.Unlock()
		owners[j.Record] = i
	}
	tickets, err := m.unmountOwnedBy(ctx, owners)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
	}
	for i, j := range jobs {
		if errs[i] != nil {
			continue
		}
		fail := func(step string, err error) {
			errs[i] = &Error{Op: "CompleteClientOffboarding", Client: j.Record.ClientID(), Err: fmt.Errorf("%s: %w", step, err),
				Hint: "the job is retried; the client stays offline and cannot remount until it completes"}
		}
		if err := durable(ctx, &Error{Op: "CompleteClientOffboarding", Client: j.Record.ClientID()}, tickets[j.Record]...); err != nil {
			errs[i] = err
			continue
		}
		if err := m.fleet.offboardNode(ctx, j.Record); err != nil {
			fail("move the node's shards", err)
			continue
		}
		if h := m.externalCleanup; h != nil {
			if err := h(ctx, j); err != nil {
				fail("external cleanup", err)
				continue
			}
		}
		m.live.t.Forget(j.Record)
	}
	for i, j := range jobs {
		j.mu.Lock()
		j.lastErr = errs[i]
		j.done = errs[i] == nil
		j.mu.Unlock()
	}
	return errs
}

// unmountOwnedBy removes, in one pass, every segment whose owner is a key
// of owners, with its replicas, logging each unmount. It returns each
// owner's tickets.
func (m *Master) unmountOwnedBy(ctx context.Context, owners map[*ClientLivenessRecord]int) (map[*ClientLivenessRecord][]Ticket, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.topo.Lock()
	defer m.topo.Unlock()
	segs := map[*segment]bool{}
	for _, s := range m.segments {
		if _, ok := owners[s.owner.Load()]; ok {
			segs[s] = true
		}
	}
	out := map[*ClientLivenessRecord][]Ticket{}
	if len(segs) == 0 {
		return out, nil
	}
	_, gone := m.dropSegmentsLocked(segs)
	for s := range segs {
		owner := s.owner.Load()
		out[owner] = append(out[owner], m.record(&Op{Kind: OpUnmountSegment, Client: s.client.id, Segment: standbySegment(s)}))
	}
	m.leave(gone...)
	return out, nil
}

// OffboardingConfig tunes how completed jobs run.
type OffboardingConfig struct {
	// Sync completes every job inside the monitor pass that prepared it
	// (a failed one is retried at the next pass); otherwise jobs go to
	// the asynchronous executor. Both run the same steps.
	Sync bool
	// BatchSize bounds the jobs one executor round completes together
	// (their segments are unmounted in one pass). Default 64.
	BatchSize int
	// RetryBase and RetryMax bound the executor's backoff between
	// attempts of a failed job (doubling). Defaults 100 ms and 30 s.
	RetryBase, RetryMax time.Duration
	// DrainTimeout bounds how long the executor, when the monitor stops,
	// keeps completing the jobs still queued. Default 5 s.
	DrainTimeout time.Duration
}

func (c OffboardingConfig) withDefaults() OffboardingConfig {
	defaults.Positive(&c.BatchSize, 64)
	defaults.Positive(&c.RetryBase, 100*time.Millisecond)
	defaults.Positive(&c.RetryMax, 30*time.Second)
	defaults.Positive(&c.DrainTimeout, 5*time.Second)
	return c
}

// offboarder runs completed jobs: synchronously in the monitor pass, or
// on the asynchronous executor (batching, retry with backoff, draining
// when stopped, queue metrics). Either way a job's steps and its effect on
// the record are the same.
type offboarder struct {
	m     *Master
	cfg   OffboardingConfig
	async bool
	log   *slog.Logger

	mu      sync.Mutex
	queue   []*ClientOffboardingJob // async: waiting; sync: failed, retried next pass
	busy    int                     // jobs taken off the queue and being completed
	kick    chan struct{}
	running bool
}

func newOffboarder(m *Master, cfg OffboardingConfig, log *slog.Logger) *offboarder {
	return &offboarder{m: m, cfg: cfg, async: !cfg.Sync, log: log, kick: make(chan struct{}, 1)}
}

// submit hands a prepared job over.
func (o *offboarder) submit(ctx context.Context, j *ClientOffboardingJob) {
	o.m.metrics.offboardingSubmitted.Inc()
	if !o.async {
		o.runSync(ctx, []*ClientOffboardingJob{j})
		return
	}
	o.mu.Lock()
	o.queue = append(o.queue, j)
	o.m.metrics.offboardingQueue.Set(float64(len(o.queue)))
	o.mu.Unlock()
	o.wake()
}

func (o *offboarder) wake() {
	tick.Kick(o.kick)
}

// runSync completes jobs in the caller's goroutine; failures are kept for
// the next pass.
func (o *offboarder) runSync(ctx context.Context, jobs []*ClientOffboardingJob) {
	o.mu.Lock()
	o.busy += len(jobs)
	o.mu.Unlock()
	errs := o.complete(ctx, jobs)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.busy -= len(jobs)
	for i, j := range jobs {
		if errs[i] != nil {
			o.queue = append(o.queue, j)
		}
	}
	o.m.metrics.offboardingQueue.Set(float64(len(o.queue)))
}

// retrySync retries the synchronous jobs that failed at an earlier pass.
func (o *offboarder) retrySync(ctx context.Context) {
	if o.async {
		return
	}
	o.mu.Lock()
	jobs := o.queue
	o.queue = nil
	o.mu.Unlock()
	if len(jobs) > 0 {
		o.m.metrics.offboardingRetries.Add(float64(len(jobs)))
		o.runSync(ctx, jobs)
	}
}

// complete runs one batch and accounts for it.
func (o *offboarder) complete(ctx context.Context, jobs []*ClientOffboardingJob) []error {
	start := time.Now()
	errs := o.m.completeOffboarding(ctx, jobs)
	o.m.metrics.offboardingBatch.Observe(float64(len(jobs)))
	o.m.metrics.offboardingSeconds.Observe(time.Since(start).Seconds())
	for i, j := range jobs {
		if errs[i] == nil {
			o.m.metrics.offboardingJobs.WithLabelValues("completed").Inc()
			o.log.Info("client offboarded: its resources are released and it may mount or register again", "client", j.Record.ClientID(), "incarnation", j.Record.Incarnation(),
				"offline_for", toDuration(o.m.clock.Steady()-j.Prepared).Round(time.Millisecond))
			continue
		}
		o.m.metrics.offboardingJobs.WithLabelValues("failed").Inc()
		n, _ := j.Attempts()
		o.log.Warn("client offboarding failed; it will be retried", "client", j.Record.ClientID(), "incarnation", j.Record.Incarnation(), "attempt", n, "err", errs[i])
	}
	return errs
}

// backoff is the wait before attempt n+1 of a job that failed n times.
func (o *offboarder) backoff(n int) time.Duration {
	return backoff.Policy{Initial: o.cfg.RetryBase, Max: o.cfg.RetryMax}.Delay(n)
}

// next takes the jobs due now, at most a batch, and the time the next
// waiting one is due (zero when none waits).
func (o *offboarder) next(now time.Time, all bool) ([]*ClientOffboardingJob, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var due, rest []*ClientOffboardingJob
	var wake time.Time
	for _, j := range o.queue {
		j.mu.Lock()
		nb := j.notBefore
		j.mu.Unlock()
		if (all || !nb.After(now)) && len(due) < o.cfg.BatchSize {
			due = append(due, j)
			continue
		}
		rest = append(rest, j)
		if wake.IsZero() || nb.Before(wake) {
			wake = nb
		}
	}
	o.queue = rest
	o.busy += len(due)
	o.m.metrics.offboardingQueue.Set(float64(len(o.queue)))
	return due, wake
}

func (o *offboarder) requeue(jobs []*ClientOffboardingJob, errs []error, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.busy -= len(jobs)
	for i, j := range jobs {
		if errs[i] == nil {
			continue
		}
		n, _ := j.Attempts()
		j.mu.Lock()
		j.notBefore = now.Add(o.backoff(n))
		j.mu.Unlock()
		o.queue = append(o.queue, j)
		o.m.metrics.offboardingRetries.Inc()
	}
	o.m.metrics.offboardingQueue.Set(float64(len(o.queue)))
}

// run is the asynchronous executor: it completes due jobs in batches
// until ctx ends, then drains what is queued (each job once more, retry
// delays ignored) within DrainTimeout.
func (o *offboarder) run(ctx context.Context) {
	o.mu.Lock()
	if o.running {
		o.mu.Unlock()
		return
	}
	o.running = true
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.running = false
		o.mu.Unlock()
	}()
	for {
		now := time.Now()
		jobs, wake := o.next(now, false)
		if len(jobs) > 0 {
			o.requeue(jobs, o.complete(ctx, jobs), time.Now())
			continue
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if !wake.IsZero() {
			timer = time.NewTimer(wake.Sub(now))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			o.drain()
			return
		case <-o.kick:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// drain completes what is queued when the executor stops. Jobs that
// still fail stay Offline records (barriers) in this process; a promoted
// or restarted master judges their clients afresh.
func (o *offboarder) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), o.cfg.DrainTimeout)
	defer cancel()
	jobs, _ := o.next(time.Now(), true)
	for len(jobs) > 0 && ctx.Err() == nil {
		errs := o.complete(ctx, jobs)
		var failed []*ClientOffboardingJob
		for i, j := range jobs {
			if errs[i] != nil {
				failed = append(failed, j)
			}
		}
		o.mu.Lock()
		o.busy -= len(jobs)
		o.queue = append(o.queue, failed...)
		o.mu.Unlock()
		if len(failed) == len(jobs) {
			jobs = nil
			break
		}
		jobs, _ = o.next(time.Now(), true)
	}
	if len(jobs) > 0 { // taken when the drain's time ran out: queued again
		o.mu.Lock()
		o.busy -= len(jobs)
		o.queue = append(o.queue, jobs...)
		o.mu.Unlock()
	}
	if left := o.Pending(); left > 0 {
		o.log.Warn("offboarding executor stopped with jobs left", "jobs", left)
	}
}

// Pending counts the jobs not completed yet: queued, waiting for a retry,
// or being completed right now.
func (o *offboarder) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.queue) + o.busy
}

// OffboardingPending counts offboarding jobs not completed yet.
func (m *Master) OffboardingPending() int { return m.offboarding.Pending() }
