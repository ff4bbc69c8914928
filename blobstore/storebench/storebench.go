// Package storebench measures one store's driver: the p50 and p99 latency
// and the throughput of each operation (Get, Put, CreateIfAbsent, CAS,
// List, Delete) at several concurrencies, every client in a closed loop.
// Every key is written under a unique shardfence-bench/ prefix, removed
// afterwards. `shardfence bench store` runs it.
package storebench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// Config is one bench run.
type Config struct {
	// Duration is the run time of each operation at each concurrency.
	Duration time.Duration
	// Clients are the concurrency levels.
	Clients []int
	// Size is the body size of every write, in bytes.
	Size int
	// Ops are the operations to measure, in order (Delete removes what
	// CreateIfAbsent made, so keep them together); empty: Operations().
	Ops []Op
}

// Name is the operation's name in the table.
func (o Op) Name() string { return o.name }

// OpsByName finds the named operations (case does not matter).
func OpsByName(names []string) ([]Op, error) {
	var out []Op
	for _, name := range names {
		i := slices.IndexFunc(Operations(), func(o Op) bool { return strings.EqualFold(o.name, strings.TrimSpace(name)) })
		if i < 0 {
			return nil, fmt.Errorf("unknown operation %q (want Get, Put, CreateIfAbsent, CAS, List, Delete)", name)
		}
		out = append(out, Operations()[i])
	}
	return out, nil
}

// Run measures cfg against root's store, under a scratch prefix removed
// afterwards, and writes the table to out; progress goes to log.
func Run(ctx context.Context, root *blobstore.Container, cfg Config, out, log io.Writer) error {
	ops := cfg.Ops
	if len(ops) == 0 {
		ops = Operations()
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	prefix := "shardfence-bench/" + time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(rnd[:])
	c, err := blobstore.Sub(root, prefix)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := removeKeys(cctx, c); err != nil {
			fmt.Fprintf(log, "bench store: scratch keys under %s/ may remain: %v\n", prefix, err)
		}
	}()
	body := make([]byte, cfg.Size)
	_, _ = rand.Read(body)
	var cells []cell
	for _, n := range cfg.Clients {
		// Each level has its own keys, so its creates never meet the
		// objects an earlier level's creates left.
		lc, err := blobstore.Sub(c, "c"+strconv.Itoa(n))
		if err != nil {
			return err
		}
		for _, op := range ops {
			fmt.Fprintf(log, "measuring %s with %d clients for %v...\n", op.name, n, cfg.Duration)
			cl, err := measure(ctx, lc, op, n, cfg.Duration, body)
			if err != nil {
				return fmt.Errorf("bench store %s: %s with %d clients: %w", root, op.name, n, err)
			}
			cells = append(cells, cl)
		}
	}
	writeTable(out, root.String(), cfg.Size, cfg.Duration, cells)
	return nil
}

// Op is one operation the bench measures.
type Op struct {
	name string
	// setup runs once per client before the clock starts; it returns the
	// client's state for run.
	setup func(ctx context.Context, c *blobstore.Container, client int, body []byte) (any, error)
	// run does one request; i counts the client's requests from 0.
	run func(ctx context.Context, c *blobstore.Container, client, i int, state any, body []byte) error
}

// listKeys is how many keys the List benchmark's prefix holds; each
// List reads them all in one page.
const listKeys = 100

// casState is a client's own CAS chain: its key and current token.
type casState struct {
	key string
	tok blobstore.Token
}

// Operations are the operations the bench knows, in table order.
func Operations() []Op {
	return []Op{
		{
			name: "Get",
			setup: func(ctx context.Context, c *blobstore.Container, client int, body []byte) (any, error) {
				key := fmt.Sprintf("get/%d", client)
				_, err := c.Put(ctx, key, body)
				return key, err
			},
			run: func(ctx context.Context, c *blobstore.Container, _, _ int, state any, _ []byte) error {
				_, err := c.Get(ctx, state.(string))
				return err
			},
		},
		{
			name: "Put",
			run: func(ctx context.Context, c *blobstore.Container, client, i int, _ any, body []byte) error {
				_, err := c.Put(ctx, fmt.Sprintf("put/%d/%d", client, i%16), body)
				return err
			},
		},
		{
			name: "CreateIfAbsent",
			run: func(ctx context.Context, c *blobstore.Container, client, i int, _ any, body []byte) error {
				_, err := c.CreateIfAbsent(ctx, createKey(client, i), body)
				return err
			},
		},
		{
			name: "CAS",
			setup: func(ctx context.Context, c *blobstore.Container, client int, body []byte) (any, error) {
				key := fmt.Sprintf("cas/%d", client)
				tok, err := c.Put(ctx, key, body)
				return &casState{key: key, tok: tok}, err
			},
			run: func(ctx context.Context, c *blobstore.Container, _, i int, state any, body []byte) error {
				s := state.(*casState)
				// A new body each time: an S3 ETag is the body's MD5, and a
				// chain must never write the same body twice.
				tok, err := c.CompareAndSwap(ctx, s.key, s.tok, stamp(body, i))
				if err == nil {
					s.tok = tok
				}
				return err
			},
		},
		{
			name: "List",
			setup: func(ctx context.Context, c *blobstore.Container, client int, body []byte) (any, error) {
				if client != 0 {
					return nil, nil
				}
				for k := range listKeys {
					if _, err := c.Put(ctx, fmt.Sprintf("list/%03d", k), body); err != nil {
						return nil, err
					}
				}
				return nil, nil
			},
			run: func(ctx context.Context, c *blobstore.Container, _, _ int, _ any, _ []byte) error {
				page, err := c.List(ctx, "list/", "", listKeys)
				if err == nil && len(page.Items) != listKeys {
					return fmt.Errorf("listing list/ returned %d keys, want %d", len(page.Items), listKeys)
				}
				return err
			},
		},
		{
			// Deletes the objects the CreateIfAbsent run made, in order,
			// so most deletes remove a real object; past them it deletes
			// missing keys, which is still one request.
			name: "Delete",
			run: func(ctx context.Context, c *blobstore.Container, client, i int, _ any, _ []byte) error {
				return c.Delete(ctx, createKey(client, i))
			},
		},
	}
}

func createKey(client, i int) string { return fmt.Sprintf("create/%d/%d", client, i) }

// stamp returns body with its first bytes replaced by i, so every write of
// a chain differs.
func stamp(body []byte, i int) []byte {
	b := slices.Clone(body)
	s := strconv.Itoa(i) + ";"
	if len(b) < len(s) {
		return []byte(s)
	}
	copy(b, s)
	return b
}

// cell is one row of the table: one operation at one concurrency.
type cell struct {
	op      string
	clients int
	ops     int
	errs    int
	firstEr error
	elapsed time.Duration
	lat     []time.Duration // sorted
}

func (r cell) opsPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

func (r cell) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(q*float64(len(r.lat))))]
}

// measure runs op in a closed loop on n clients for d.
func measure(ctx context.Context, c *blobstore.Container, op Op, n int, d time.Duration, body []byte) (cell, error) {
	states := make([]any, n)
	if op.setup != nil {
		for i := range n {
			s, err := op.setup(ctx, c, i, body)
			if err != nil {
				return cell{}, fmt.Errorf("setup: %w", err)
			}
			states[i] = s
		}
	}
	var (
		mu  sync.Mutex
		res = cell{op: op.name, clients: n}
		wg  sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for client := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1024)
			errs := 0
			var first error
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				t0 := time.Now()
				err := op.run(ctx, c, client, i, states[client], body)
				lat = append(lat, time.Since(t0))
				if err != nil {
					errs++
					if first == nil {
						first = err
					}
				}
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.errs += errs
			if res.firstEr == nil {
				res.firstEr = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.ops = len(res.lat)
	slices.Sort(res.lat)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	// A bench that measured failures would print fiction.
	if res.errs > 0 {
		return res, fmt.Errorf("%d of %d requests failed; first: %w", res.errs, res.ops, res.firstEr)
	}
	return res, nil
}

func writeTable(w io.Writer, store string, size int, d time.Duration, cells []cell) {
	fmt.Fprintf(w, "Store: %s\nBody: %d bytes; each row ran %v in a closed loop per client\n\n", store, size, d)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tCLIENTS\tREQUESTS\tOPS/S\tP50\tP99\t")
	for _, r := range cells {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t\n", r.op, r.clients, r.ops, r.opsPerSec(), latency(r.quantile(0.50)), latency(r.quantile(0.99)))
	}
	tw.Flush()
}

// latency prints microseconds to a tenth below a millisecond, where a
// local store's requests fall.
func latency(d time.Duration) string {
	if d >= time.Millisecond {
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}

// removeKeys deletes every key under c, 16 at a time.
func removeKeys(ctx context.Context, c *blobstore.Container) error {
	keys, err := blobstore.ListAll(ctx, c, "")
	if err != nil {
		return err
	}
	sem := make(chan struct{}, 16)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for _, k := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := c.Delete(ctx, k.Key); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
