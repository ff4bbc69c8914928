package recoverybench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/blobstore/metered"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/internal/flush"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// HydrateConfig is one hydrate-and-replay bench run.
type HydrateConfig struct {
	// Store is where the shard is written, under a fresh prefix; nil: the
	// fs driver in a temporary directory. Where names it in the table.
	Store *blobstore.Container
	Where string
	// CheckpointMiB and TranslogMiB size the shard: a checkpoint in files
	// of FileMiB, and translog after it in generations of SyncKiB (above
	// the 1 MiB inline limit: data objects).
	CheckpointMiB, TranslogMiB, FileMiB, SyncKiB int
	// Parallelism is the concurrent requests of both the recovery and the
	// plain GET, and the concurrent files of the disk write.
	Parallelism int
	// ChunkSize is the recovery's recovery.Options.HydrateChunkSize (0:
	// its default; negative: one stream per file).
	ChunkSize int64
	// Runs is how many rounds of plain GET, disk write and recovery are
	// measured, interleaved; the summary takes their medians. Default 2.
	Runs int
	// StoreCPU, when set, is the CPU time the store's server used so far
	// (a MinIO the bench started): each step's CPU then counts it too.
	StoreCPU func() time.Duration
}

// RunHydrate writes a shard, then measures, Runs times in turn, a plain
// parallel GET of the same bytes, the local disk's write rate (the
// checkpoint's bytes written to new files beside the hydration's, as the
// hydration writes them) and recovery.Open (hydrate and replay), and
// writes the table and the ratios to out; progress goes to log.
func RunHydrate(ctx context.Context, cfg HydrateConfig, out, log io.Writer) error {
	if cfg.Runs <= 0 {
		cfg.Runs = 2
	}
	work, err := os.MkdirTemp("", "shardfence-bench-recovery-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	var base *blobstore.Container
	where := cfg.Where
	if cfg.Store == nil {
		c, err := fs.Open(filepath.Join(work, "store"))
		if err != nil {
			return err
		}
		defer c.Close()
		base, where = c, "fs (temporary directory)"
	} else if base, err = blobstore.Sub(cfg.Store, fmt.Sprintf("bench-recovery-%d", time.Now().UnixNano())); err != nil {
		return err
	}
	b := &hydrateBench{cfg: cfg, work: work, store: metered.New(base, "bench"), log: log, term: 2}
	defer cleanup(context.WithoutCancel(ctx), base)

	fmt.Fprintf(log, "writing a %d MiB checkpoint and %d MiB of translog to %s...\n", cfg.CheckpointMiB, cfg.TranslogMiB, where)
	b.ckptBytes, b.tlogBytes, err = fillShard(ctx, b.store.Container, work, int64(cfg.CheckpointMiB)<<20, int64(cfg.TranslogMiB)<<20, int64(cfg.FileMiB)<<20, cfg.SyncKiB<<10)
	if err != nil {
		return fmt.Errorf("bench recovery: setup: %w", err)
	}
	for range cfg.Runs {
		for _, step := range []struct {
			name string
			fn   func(context.Context) (int64, error)
		}{{rowGet, b.get}, {rowDisk, b.disk}, {rowRec, b.recover}} {
			if err := b.measure(ctx, step.name, step.fn); err != nil {
				return err
			}
		}
	}
	if err := b.measure(ctx, rowGetWrite, b.getWrite); err != nil {
		return err
	}
	fmt.Fprintf(out, "store %s; checkpoint %d MiB in %d MiB files, translog %d MiB in %d KiB generations; parallelism %d; hydration pieces %s; %d runs\n\n",
		where, b.ckptBytes>>20, cfg.FileMiB, b.tlogBytes>>20, cfg.SyncKiB, cfg.Parallelism, chunkLabel(cfg.ChunkSize), cfg.Runs)
	return writeHydrateTable(out, b.rows, b.ckptBytes+b.tlogBytes, b.ckptBytes, cfg.StoreCPU != nil)
}

// The rows of the hydrate table.
const (
	rowGet      = "plain parallel GET"
	rowDisk     = "local disk write (checkpoint bytes, no fsync, as hydration)"
	rowRec      = "recovery (hydrate + replay)"
	rowGetWrite = "reference: GET + write checkpoint files locally"
)

// hydrateBench is one RunHydrate: the shard it wrote and the steps
// measured so far.
type hydrateBench struct {
	cfg                  HydrateConfig
	work                 string
	store                *metered.Container
	log                  io.Writer
	ckptBytes, tlogBytes int64
	term                 int64 // the next recovery's
	rows                 []measured
}

// measured is one measured step: the bytes it moved, its wall time, the
// CPU time it used and its store requests.
type measured struct {
	name         string
	bytes        int64
	elapsed, cpu time.Duration
	reqs         uint64
}

func (b *hydrateBench) cpuNow() time.Duration {
	c := processCPU()
	if b.cfg.StoreCPU != nil {
		c += b.cfg.StoreCPU()
	}
	return c
}

// measure runs fn as the step name and records it. It first writes back
// what the previous step left dirty (the setup's writes, the store's own),
// and collects and returns to the system the heap it left (a plain GET's
// whole bodies), so no step pays for another's.
func (b *hydrateBench) measure(ctx context.Context, name string, fn func(context.Context) (int64, error)) error {
	runtime.GC()
	debug.FreeOSMemory()
	flush.Dirty()
	before := b.store.Snapshot()
	cpu := b.cpuNow()
	start := time.Now()
	n, err := fn(ctx)
	if err != nil {
		return fmt.Errorf("bench recovery %s: %w", name, err)
	}
	b.rows = append(b.rows, measured{name, n, time.Since(start), b.cpuNow() - cpu, b.store.Snapshot().Sub(before).Requests()})
	return nil
}

func (b *hydrateBench) get(ctx context.Context) (int64, error) {
	return plainGet(ctx, b.store.Container, b.cfg.Parallelism, "")
}

func (b *hydrateBench) getWrite(ctx context.Context) (int64, error) {
	dir, err := os.MkdirTemp(b.work, "written-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	return plainGet(ctx, b.store.Container, b.cfg.Parallelism, dir)
}

func (b *hydrateBench) disk(context.Context) (int64, error) {
	dir, err := os.MkdirTemp(b.work, "disk-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	return diskWrite(dir, b.ckptBytes, int64(b.cfg.FileMiB)<<20, b.cfg.Parallelism)
}

// recover opens the shard under the next term, hydrating into a new
// directory, and returns the bytes restored: the checkpoint's and the
// replayed ops'.
func (b *hydrateBench) recover(ctx context.Context) (int64, error) {
	dir, err := os.MkdirTemp(b.work, "hydrated-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	var replayed atomic.Int64
	start := time.Now()
	var ph phases
	o := recovery.Options{Dir: dir, Parallelism: b.cfg.Parallelism, HydrateChunkSize: b.cfg.ChunkSize,
		Progress: func(p recovery.Progress) { ph.seen(p.Phase, time.Since(start)) },
		Apply: func(_ context.Context, bt translog.Batch) error {
			for _, op := range bt.Ops {
				replayed.Add(int64(len(op)))
			}
			return nil
		}}
	sh, err := recovery.Open(ctx, b.store.Container, shard, b.term, fmt.Sprintf("a%d", b.term), o)
	if err != nil {
		return 0, err
	}
	b.term++
	_ = sh.Writer.Close(ctx)
	ph.report(b.log, "hydrate", "replay")
	fmt.Fprintf(b.log, "  open returned at %.2fs\n", time.Since(start).Seconds())
	if sh.Checkpoint == nil {
		return 0, fmt.Errorf("no checkpoint hydrated (refused: %+v)", sh.Refused)
	}
	return sh.Checkpoint.Bytes() + replayed.Load(), nil
}

// phases records when each phase of a recovery first and last reported
// progress.
type phases struct {
	mu sync.Mutex
	at map[string][2]time.Duration
}

func (p *phases) seen(phase string, t time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = map[string][2]time.Duration{}
	}
	ph, ok := p.at[phase]
	if !ok {
		ph[0] = t
	}
	ph[1] = t
	p.at[phase] = ph
}

func (p *phases) report(log io.Writer, names ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range names {
		ph := p.at[name]
		fmt.Fprintf(log, "  %s: first progress at %.2fs, last at %.2fs\n", name, ph[0].Seconds(), ph[1].Seconds())
	}
}

// chunkLabel names the hydration's piece size in the table's header.
func chunkLabel(size int64) string {
	switch {
	case size < 0:
		return "off"
	case size > 0:
		return fmt.Sprintf("%d KiB", size>>10)
	}
	return "default"
}

// hydrateSummary is the medians of the measured runs by step, wall time
// and CPU time in seconds.
type hydrateSummary struct {
	getSec, diskSec, recSec, getCPU, diskCPU, recCPU []float64
}

// summarizeHydrate sorts the rows' times by step; a recovery that
// restored other than total bytes is an error.
func summarizeHydrate(rows []measured, total int64) (hydrateSummary, error) {
	var s hydrateSummary
	for _, r := range rows {
		switch r.name {
		case rowGet:
			s.getSec, s.getCPU = append(s.getSec, r.elapsed.Seconds()), append(s.getCPU, r.cpu.Seconds())
		case rowDisk:
			s.diskSec, s.diskCPU = append(s.diskSec, r.elapsed.Seconds()), append(s.diskCPU, r.cpu.Seconds())
		case rowRec:
			s.recSec, s.recCPU = append(s.recSec, r.elapsed.Seconds()), append(s.recCPU, r.cpu.Seconds())
			if r.bytes != total {
				return s, fmt.Errorf("bench recovery: restored %d bytes, wrote %d", r.bytes, total)
			}
		}
	}
	return s, nil
}

// writeHydrateTable writes the measured rows, then the ratios of the
// medians (writeHydrateRatios) and the CPU medians. storeCPU says the CPU
// column counts the store's server too.
func writeHydrateTable(out io.Writer, rows []measured, total, ckpt int64, storeCPU bool) error {
	cpuWho := "this process"
	if storeCPU {
		cpuWho += " and the store's server"
	}
	fmt.Fprintf(out, "CPU s: CPU time (user and system) of %s during the step\n\n", cpuWho)
	fmt.Fprintln(out, "| run | MiB | requests | seconds | MB/s | CPU s |")
	fmt.Fprintln(out, "| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		rate := float64(r.bytes) / 1e6 / r.elapsed.Seconds()
		fmt.Fprintf(out, "| %s | %d | %d | %.2f | %.0f | %.2f |\n", r.name, r.bytes>>20, r.reqs, r.elapsed.Seconds(), rate, r.cpu.Seconds())
	}
	s, err := summarizeHydrate(rows, total)
	if err != nil {
		return err
	}
	writeHydrateRatios(out, total, ckpt, medianOf(s.getSec), medianOf(s.diskSec), medianOf(s.recSec), s.getSec, s.recSec)
	if g, d, r := medianOf(s.getCPU), medianOf(s.diskCPU), medianOf(s.recCPU); r > 0 {
		fmt.Fprintf(out, "CPU (medians): plain GET %.2f s, disk write %.2f s, recovery %.2f s; GET CPU / recovery CPU %.2fx: where the CPU is what runs out, the most the recovery can reach of the GET's rate\n", g, d, r, g/r)
	}
	return nil
}

// writeHydrateRatios prints the medians and the recovery's ratio to the
// plain GET, to the disk and to the better of the two bounds. A recovery
// reads total bytes and writes ckpt of them to disk: at best in the time
// of the slower of the GET (total bytes) and the disk write (ckpt bytes),
// both overlapped; min(GET, disk) is that bound as a rate of total bytes.
// Done one after the other (as on a machine whose cores both spend), the
// bound is the sum of the two times.
func writeHydrateRatios(out io.Writer, total, ckpt int64, getS, diskS, recS float64, getSec, recSec []float64) {
	mb := func(b int64, s float64) float64 { return float64(b) / 1e6 / s }
	getR, recR := mb(total, getS), mb(total, recS)
	diskR := mb(ckpt, diskS)
	overlapped := max(getS, diskS)
	serial := getS + diskS
	fmt.Fprintf(out, "\nmedians: plain GET %.0f MB/s (%.2f s), disk write %.0f MB/s (%.2f s for the checkpoint's %d MiB), recovery %.0f MB/s (%.2f s)\n",
		getR, getS, diskR, diskS, ckpt>>20, recR, recS)
	fmt.Fprintf(out, "recovery / plain GET: %.2fx; recovery / disk write: %.2fx (the disk's time for the checkpoint's bytes over the recovery's time)\n", recR/getR, diskS/recS)
	fmt.Fprintf(out, "recovery / min(GET, disk): %.2fx (bound max(GET time, disk time) = %.2f s); recovery / (GET then disk): %.2fx (bound %.2f s)\n",
		overlapped/recS, overlapped, serial/recS, serial)
	var pairs []string
	for i := range min(len(getSec), len(recSec)) {
		pairs = append(pairs, fmt.Sprintf("%.2fx", getSec[i]/recSec[i]))
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(out, "\ntarget hydrate + replay >= 0.8x plain parallel GET: %.2fx (each run: %s) (%s)\n", recR/getR, strings.Join(pairs, ", "), verdict(recR >= 0.8*getR))
	fmt.Fprintf(out, "target hydrate + replay >= 0.9x min(GET, disk write): %.2fx (%s)\n", overlapped/recS, verdict(overlapped/recS >= 0.9))
}

// diskWrite writes size bytes of random data to new files of fileSize
// under dir, par files at a time, in 1 MiB writes and without fsync (as
// hydration writes a checkpoint's files), and returns the bytes written.
func diskWrite(dir string, size, fileSize int64, par int) (int64, error) {
	buf := make([]byte, 1<<20)
	_, _ = rand.NewChaCha8([32]byte{2}).Read(buf)
	var n atomic.Int64
	var first error
	var once sync.Once
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, off := 0, int64(0); off < size; i, off = i+1, off+fileSize {
		sz := min(fileSize, size-off)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := func() error {
				f, err := os.Create(filepath.Join(dir, fmt.Sprintf("seg-%04d", i)))
				if err != nil {
					return err
				}
				for w := int64(0); w < sz; {
					m, err := f.Write(buf[:min(int64(len(buf)), sz-w)])
					w += int64(m)
					n.Add(int64(m))
					if err != nil {
						f.Close()
						return err
					}
				}
				return f.Close()
			}()
			if err != nil {
				once.Do(func() { first = err })
			}
		})
	}
	wg.Wait()
	return n.Load(), first
}

// medianOf v (the mean of the middle two for an even count).
func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fillShard writes term 1: a checkpoint at gen 0 and translog after it.
func fillShard(ctx context.Context, store *blobstore.Container, work string, ckpt, tlog, fileSize int64, syncSize int) (int64, int64, error) {
	sh, err := recovery.Open(ctx, store, shard, 1, "a1", recovery.Options{Clock: clock.System()})
	if err != nil {
		return 0, 0, err
	}
	src := filepath.Join(work, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return 0, 0, err
	}
	rng := rand.NewChaCha8([32]byte{1})
	var files []seal.LocalFile
	var written int64
	for i := 0; written < ckpt; i++ {
		n := min(fileSize, ckpt-written)
		buf := make([]byte, n)
		_, _ = rng.Read(buf)
		p := filepath.Join(src, fmt.Sprintf("seg-%04d", i))
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			return 0, 0, err
		}
		files = append(files, seal.LocalFile{Name: filepath.Base(p), Path: p})
		written += n
	}
	if _, err := seal.PublishCheckpoint(ctx, store, sh.Chain, 0, files, seal.PublishOptions{Options: seal.Options{Parallelism: 4}}); err != nil {
		return 0, 0, err
	}
	const opSize = 64 << 10
	op := make([]byte, opSize)
	_, _ = rng.Read(op)
	var tl int64
	for tl < tlog {
		var ops [][]byte
		for sz := 0; sz < syncSize && tl < tlog; sz += opSize {
			ops = append(ops, op)
			tl += opSize
		}
		if _, err := sh.Writer.Append(ctx, ops); err != nil {
			return 0, 0, err
		}
	}
	return written, tl, sh.Writer.Close(ctx)
}

// plainGet reads every checkpoint file and translog object of the shard
// with par concurrent GETs and returns the bytes read: the reference a
// recovery is measured against. With dir, checkpoint files are written
// there too, as a hydration must.
func plainGet(ctx context.Context, store *blobstore.Container, par int, dir string) (int64, error) {
	var keys []string
	for _, prefix := range []string{layout.FilesDir, layout.TranslogDir} {
		items, err := blobstore.ListAll(ctx, store, prefix)
		if err != nil {
			return 0, err
		}
		for _, it := range items {
			keys = append(keys, it.Key)
		}
	}
	var n atomic.Int64
	var first error
	var once sync.Once
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			obj, err := store.Get(ctx, k)
			if err != nil {
				once.Do(func() { first = err })
				return
			}
			if strings.HasPrefix(k, layout.FilesDir) || strings.HasPrefix(k, layout.DataDir) {
				n.Add(int64(len(obj.Body)))
			}
			if dir != "" && strings.HasPrefix(k, layout.FilesDir) {
				if err := os.WriteFile(filepath.Join(dir, strings.ReplaceAll(k, "/", "_")), obj.Body, 0o644); err != nil {
					once.Do(func() { first = err })
				}
			}
		})
	}
	wg.Wait()
	return n.Load(), first
}

// cleanup deletes what the run wrote.
func cleanup(ctx context.Context, store *blobstore.Container) {
	items, err := blobstore.ListAll(ctx, store, "")
	if err != nil {
		return
	}
	for _, it := range items {
		_ = store.Delete(ctx, it.Key)
	}
}
