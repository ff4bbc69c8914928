// Package warmbench measures warm serving (`shardfence bench warm`): the
// time from a warm Open until the first ReadCheckpointFile answer, for
// checkpoints of several sizes, and a random-read workload over a partial
// shard against the same reads once it is full. The sidecar runs in
// process behind its HTTP handler; the primary's side is the client
// package, as a primary would use it.
package warmbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"text/tabwriter"
	"time"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/fs"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/clock"
	"github.com/shardfence/shardfence/internal/flush"
	"github.com/shardfence/shardfence/recovery"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/sidecar"
)

// Config is one bench run.
type Config struct {
	// Store is where the shards are written, each under a fresh prefix;
	// nil: the fs driver in a temporary directory. Where names it.
	Store *blobstore.Container
	Where string
	// SizesMiB are the checkpoint sizes whose time to first read is
	// measured, in files of FileMiB.
	SizesMiB []int
	FileMiB  int
	// Runs is how many warm opens (one term each) measure each size.
	Runs int
	// Reads random reads of ReadBytes over the largest checkpoint, while
	// partial and then full; BlockBytes is the sidecar's cache block.
	Reads      int
	ReadBytes  int
	BlockBytes int64
	// HydrateParallelism is the sidecar's CacheOptions.HydrateParallelism
	// (0: its default; -1: no background hydration, to see what it costs
	// the first read; the random reads then never see a full shard).
	HydrateParallelism int
}

const shard = "warm"

// Run writes each shard, measures, and writes the tables to out; progress
// goes to log.
func Run(ctx context.Context, cfg Config, out, log io.Writer) error {
	work, err := os.MkdirTemp("", "shardfence-bench-warm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	root, where := cfg.Store, cfg.Where
	if root == nil {
		c, err := fs.Open(filepath.Join(work, "store"))
		if err != nil {
			return err
		}
		defer c.Close()
		root, where = c, "fs (temporary directory)"
	}
	type ttfr struct {
		mib         int
		open, first []time.Duration
	}
	var rows []ttfr
	var partial, full []time.Duration
	var partialReads int
	sizes := slices.Clone(cfg.SizesMiB)
	sort.Ints(sizes)
	for i, mib := range sizes {
		store, err := blobstore.Sub(root, fmt.Sprintf("bench-warm-%d-%d", time.Now().UnixNano(), mib))
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "writing a %d MiB checkpoint to %s...\n", mib, where)
		if err := Fill(ctx, store, shard, work, int64(mib)<<20, int64(cfg.FileMiB)<<20); err != nil {
			cleanup(ctx, store)
			return fmt.Errorf("bench warm: setup: %w", err)
		}
		// MinIO (or the fs driver) has just been sent the checkpoint:
		// write back the dirty pages now, or the measured runs pay for
		// that flush (the larger the checkpoint, the more).
		flush.Dirty()
		row := ttfr{mib: mib}
		last := i == len(sizes)-1
		for run := range cfg.Runs {
			term := int64(2 + run)
			workload := last && run == cfg.Runs-1 && cfg.Reads > 0
			o, f, p, fl, np, err := measure(ctx, store, work, term, cfg, workload, log)
			if err != nil {
				cleanup(ctx, store)
				return fmt.Errorf("bench warm: %d MiB, term %d: %w", mib, term, err)
			}
			row.open, row.first = append(row.open, o), append(row.first, f)
			if workload {
				partial, full, partialReads = p, fl, np
			}
		}
		rows = append(rows, row)
		cleanup(ctx, store)
	}

	hyd := "background hydration on"
	if cfg.HydrateParallelism < 0 {
		hyd = "background hydration off"
	}
	fmt.Fprintf(out, "Time to first read: warm Open until the first ReadCheckpointFile answer (%d B at offset 0), %s, median of %d opens, %s\n\n", cfg.ReadBytes, where, cfg.Runs, hyd)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "checkpoint\tfiles\tOpen returned\tfirst read answered\tall runs (first read)\t")
	var firsts []time.Duration
	for _, r := range rows {
		files := (r.mib + cfg.FileMiB - 1) / cfg.FileMiB
		med := median(r.first)
		firsts = append(firsts, med)
		fmt.Fprintf(tw, "%d MiB\t%d\t%s\t%s\t%s\t\n", r.mib, files, ms(median(r.open)), ms(med), list(r.first))
	}
	tw.Flush()
	if len(firsts) >= 2 {
		lo, hi := slices.Min(firsts), slices.Max(firsts)
		within := float64(hi-lo) / float64(lo)
		verdict := "MET"
		if within > 0.2 || hi >= time.Second {
			verdict = "MISSED"
		}
		fmt.Fprintf(out, "\ntarget time to first read within 20%% across sizes and under 1 s: spread %.0f%%, slowest %s (%s)\n", 100*within, ms(hi), verdict)
	}
	if len(partial) > 0 {
		fmt.Fprintf(out, "\nRandom reads of %d B over the %d MiB checkpoint (%d reads, %d KiB blocks): while partial (%d of them before the shard turned full) and the same offsets once full\n\n",
			cfg.ReadBytes, sizes[len(sizes)-1], cfg.Reads, cfg.BlockBytes>>10, partialReads)
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "locality\tp50\tp99\tmax\t")
		for _, r := range []struct {
			name string
			d    []time.Duration
		}{{"partial", partial}, {"full", full}} {
			s := slices.Clone(r.d)
			slices.Sort(s)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.name, ms(pct(s, 50)), ms(pct(s, 99)), ms(s[len(s)-1]))
		}
		tw.Flush()
	}
	return nil
}

// Fill writes shard name under root as a sidecar would: term 1, a
// checkpoint of size bytes of random data in files of fileSize (staged in
// a folder under work), and a little translog after it.
func Fill(ctx context.Context, root *blobstore.Container, name, work string, size, fileSize int64) error {
	// A sidecar keeps each shard under its name.
	store, err := blobstore.Sub(root, name)
	if err != nil {
		return err
	}
	sh, err := recovery.Open(ctx, store, name, 1, "a1", recovery.Options{Clock: clock.System()})
	if err != nil {
		return err
	}
	src, err := os.MkdirTemp(work, "src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	rng := rand.NewChaCha8([32]byte{9})
	var files []seal.LocalFile
	buf := make([]byte, 1<<20)
	for i, written := 0, int64(0); written < size; i++ {
		n := min(fileSize, size-written)
		p := filepath.Join(src, fmt.Sprintf("seg-%04d", i))
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		for left := n; left > 0; left -= int64(len(buf)) {
			_, _ = rng.Read(buf)
			if _, err := f.Write(buf[:min(left, int64(len(buf)))]); err != nil {
				f.Close()
				return err
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
		files = append(files, seal.LocalFile{Name: filepath.Base(p), Path: p})
		written += n
	}
	if _, err := seal.PublishCheckpoint(ctx, store, sh.Chain, 0, files, seal.PublishOptions{Options: seal.Options{Parallelism: 4}}); err != nil {
		return err
	}
	for i := range 100 {
		if _, err := sh.Writer.Append(ctx, [][]byte{fmt.Appendf(nil, "op-%d", i)}); err != nil {
			return err
		}
	}
	return sh.Writer.Close(ctx)
}

// measure opens the shard warm at term on a fresh sidecar, times Open and
// the first read, and with workload runs the random reads while partial,
// waits for full and runs them again.
func measure(ctx context.Context, store *blobstore.Container, work string, term int64, cfg Config, workload bool, log io.Writer) (open, first time.Duration, partial, full []time.Duration, partialReads int, err error) {
	cacheDir, err := os.MkdirTemp(work, "cache-")
	if err != nil {
		return
	}
	defer os.RemoveAll(cacheDir)
	c, stop, err := startSidecar(ctx, store, cacheDir, cfg)
	if err != nil {
		return
	}
	defer stop()
	// A connection up before the clock starts, as a primary's would be.
	if _, err = c.Status(ctx, shard); client.Reason(err) != client.ReasonNotOpen {
		err = fmt.Errorf("status before open: %w", err)
		return
	}
	err = nil

	start := time.Now()
	o, err := c.Open(ctx, &sidecarv1.OpenRequest{Shard: shard, Term: term, AllocationId: fmt.Sprintf("a%d", term), Warm: true}, nil)
	if err != nil {
		return
	}
	open = time.Since(start)
	m := o.GetCheckpoint()
	if m == nil || len(m.GetFiles()) == 0 {
		err = fmt.Errorf("the warm open served no checkpoint")
		return
	}
	files := c.CheckpointFiles(ctx, shard, m)
	p := make([]byte, cfg.ReadBytes)
	if _, err = files[m.GetFiles()[0].GetName()].ReadAt(p, 0); err != nil {
		return
	}
	first = time.Since(start)
	fmt.Fprintf(log, "term %d: open %s, first read %s\n", term, ms(open), ms(first))
	if !workload || cfg.HydrateParallelism < 0 {
		return
	}
	r := randomReads{c: c, offs: readOffsets(m, files, term, cfg), p: p}
	if partial, partialReads, err = r.run(ctx); err != nil {
		return
	}
	fmt.Fprintf(log, "term %d: %d random reads while partial; waiting for full...\n", term, len(partial))
	if err = waitFull(ctx, c, term, start, log); err != nil {
		return
	}
	full, _, err = r.run(ctx)
	return
}

// startSidecar runs a sidecar over store, caching in cacheDir, behind its
// HTTP handler on a local port, and returns a client of it; stop ends
// both.
func startSidecar(ctx context.Context, store *blobstore.Container, cacheDir string, cfg Config) (c *client.Client, stop func(), err error) {
	srv, err := sidecar.New(ctx, store, sidecar.Options{Cache: sidecar.CacheOptions{Dir: cacheDir, BlockBytes: cfg.BlockBytes, HydrateParallelism: cfg.HydrateParallelism}})
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = srv.Shutdown(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	hs := &http.Server{Handler: srv.Handler(sidecar.HandlerOptions{}), ReadHeaderTimeout: 10 * time.Second, Protocols: new(http.Protocols)}
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = hs.Serve(ln) }()
	stopServer := func() {
		_ = srv.Shutdown(context.WithoutCancel(ctx))
		_ = hs.Close()
	}
	if c, err = client.New(ln.Addr().String()); err != nil {
		stopServer()
		return nil, nil, err
	}
	return c, func() { c.Close(); stopServer() }, nil
}

// readAt is one random read: ReadBytes of a checkpoint file at off.
type readAt struct {
	f   *client.CheckpointFile
	off int64
}

// readOffsets draws cfg.Reads random reads over the checkpoint's files,
// seeded by term.
func readOffsets(m *sidecarv1.CheckpointManifest, files map[string]*client.CheckpointFile, term int64, cfg Config) []readAt {
	rng := rand.New(rand.NewPCG(uint64(term), 1))
	offs := make([]readAt, cfg.Reads)
	for i := range offs {
		fi := m.GetFiles()[rng.IntN(len(m.GetFiles()))]
		offs[i] = readAt{files[fi.GetName()], rng.Int64N(max(1, fi.GetSize()-int64(cfg.ReadBytes)))}
	}
	return offs
}

// randomReads times a list of reads through c.
type randomReads struct {
	c    *client.Client
	offs []readAt
	p    []byte
}

// run times each read; partialN is how many ran before the shard was seen
// full (its locality is asked every 25 reads).
func (r randomReads) run(ctx context.Context) (took []time.Duration, partialN int, err error) {
	isFull := false
	for i, a := range r.offs {
		if !isFull && i%25 == 0 {
			st, err := r.c.Status(ctx, shard)
			if err != nil {
				return nil, 0, err
			}
			isFull = st.GetLocality() == "full"
		}
		t := time.Now()
		if _, err := a.f.ReadAt(r.p, a.off); err != nil {
			return nil, 0, err
		}
		took = append(took, time.Since(t))
		if !isFull {
			partialN = i + 1
		}
	}
	return took, partialN, nil
}

// waitFull waits until the shard is full, logging its warm errors.
func waitFull(ctx context.Context, c *client.Client, term int64, start time.Time, log io.Writer) error {
	for {
		st, err := c.Status(ctx, shard)
		if err != nil {
			return err
		}
		if st.GetLocality() == "full" {
			fmt.Fprintf(log, "term %d: full after %s (%d MiB local)\n", term, ms(time.Since(start)), st.GetCheckpointBytesLocal()>>20)
			return nil
		}
		if st.GetWarmError() != "" {
			fmt.Fprintf(log, "warm error: %s\n", st.GetWarmError())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func cleanup(ctx context.Context, store *blobstore.Container) {
	items, err := blobstore.ListAll(context.WithoutCancel(ctx), store, "")
	if err != nil {
		return
	}
	for _, it := range items {
		_ = store.Delete(context.WithoutCancel(ctx), it.Key)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func pct(sorted []time.Duration, p int) time.Duration {
	return sorted[(len(sorted)-1)*p/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func list(d []time.Duration) string {
	out := ""
	for i, x := range d {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%.0f", float64(x.Microseconds())/1000)
	}
	return out + " ms"
}
