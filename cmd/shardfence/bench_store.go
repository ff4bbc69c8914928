package main

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

const benchStoreSummary = "object-store driver: p50/p99 latency and ops/s per operation at 1 and N clients"

// storeOp is one operation kind the store bench measures.
type storeOp struct {
	name string
	// setup runs once per client before the clock starts; it returns the
	// client's state for run.
	setup func(ctx context.Context, c *blobstore.Container, client int, body []byte) (any, error)
	// run does one request; i counts the client's requests from 0.
	run func(ctx context.Context, c *blobstore.Container, client, i int, state any, body []byte) error
}

// benchListKeys is how many keys the List benchmark's prefix holds; each
// List reads them all in one page.
const benchListKeys = 100

// casState is a client's own CAS chain: its key and current token.
type casState struct {
	key string
	tok blobstore.Token
}

func storeOps() []storeOp {
	return []storeOp{
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
				for k := range benchListKeys {
					if _, err := c.Put(ctx, fmt.Sprintf("list/%03d", k), body); err != nil {
						return nil, err
					}
				}
				return nil, nil
			},
			run: func(ctx context.Context, c *blobstore.Container, _, _ int, _ any, _ []byte) error {
				page, err := c.List(ctx, "list/", "", benchListKeys)
				if err == nil && len(page.Items) != benchListKeys {
					return fmt.Errorf("listing list/ returned %d keys, want %d", len(page.Items), benchListKeys)
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

// storeCell is one row of the table: one operation at one concurrency.
type storeCell struct {
	op      string
	clients int
	ops     int
	errs    int
	firstEr error
	elapsed time.Duration
	lat     []time.Duration // sorted
}

func (r storeCell) opsPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

func (r storeCell) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(q*float64(len(r.lat))))]
}

func runBenchStore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench store", stderr)
	store := fs.String("store", "", "store URL to measure, e.g. s3://bucket/prefix?endpoint=..., minio://host:port/bucket, file://./data, mem://x")
	duration := fs.Duration("duration", 500*time.Millisecond, "run time of each operation at each concurrency (the run takes about 12 times this)")
	clientsFlag := fs.String("clients", "1,16", "comma-separated concurrency levels, each client in a closed loop")
	size := fs.Int("size", 1024, "body size in bytes of every write")
	opsFlag := fs.String("ops", "Get,Put,CreateIfAbsent,CAS,List,Delete", "comma-separated operations to measure (Delete removes what CreateIfAbsent made, so keep them together)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: shardfence bench store --store URL [--duration D] [--clients 1,16] [--size N] [--ops a,b]\n\n")
		fmt.Fprintf(stderr, "Measures each operation of the store's driver in a closed loop and prints p50/p99 latency and\n")
		fmt.Fprintf(stderr, "ops/s. Every key is written under a unique shardfence-bench/ prefix, removed afterwards.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (the store goes in --store)", errUsage, fs.Arg(0))
	}
	if *store == "" {
		return fmt.Errorf("%w: --store is required", errUsage)
	}
	if *duration <= 0 || *size < 0 {
		return fmt.Errorf("%w: --duration must be positive and --size not negative", errUsage)
	}
	var levels []int
	for _, s := range strings.Split(*clientsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1024 {
			return fmt.Errorf("%w: --clients %q: want comma-separated counts from 1 to 1024", errUsage, *clientsFlag)
		}
		levels = append(levels, n)
	}
	var ops []storeOp
	for _, name := range strings.Split(*opsFlag, ",") {
		i := slices.IndexFunc(storeOps(), func(o storeOp) bool { return strings.EqualFold(o.name, strings.TrimSpace(name)) })
		if i < 0 {
			return fmt.Errorf("%w: unknown operation %q (want Get, Put, CreateIfAbsent, CAS, List, Delete)", errUsage, name)
		}
		ops = append(ops, storeOps()[i])
	}

	root, err := blobstore.Open(ctx, *store)
	if err != nil {
		return err
	}
	defer root.Close()
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
		if err := removeBenchKeys(cctx, c); err != nil {
			fmt.Fprintf(stderr, "bench store: scratch keys under %s/ may remain: %v\n", prefix, err)
		}
	}()

	body := make([]byte, *size)
	_, _ = rand.Read(body)
	var cells []storeCell
	for _, n := range levels {
		// Each level has its own keys, so its creates never meet the
		// objects an earlier level's creates left.
		lc, err := blobstore.Sub(c, "c"+strconv.Itoa(n))
		if err != nil {
			return err
		}
		for _, op := range ops {
			fmt.Fprintf(stderr, "measuring %s with %d clients for %v...\n", op.name, n, *duration)
			cell, err := measure(ctx, lc, op, n, *duration, body)
			if err != nil {
				return fmt.Errorf("bench store %s: %s with %d clients: %w", root, op.name, n, err)
			}
			cells = append(cells, cell)
		}
	}
	writeStoreTable(stdout, root.String(), *size, *duration, cells)
	return nil
}

// measure runs op in a closed loop on n clients for d.
func measure(ctx context.Context, c *blobstore.Container, op storeOp, n int, d time.Duration, body []byte) (storeCell, error) {
	states := make([]any, n)
	if op.setup != nil {
		for i := range n {
			s, err := op.setup(ctx, c, i, body)
			if err != nil {
				return storeCell{}, fmt.Errorf("setup: %w", err)
			}
			states[i] = s
		}
	}
	var (
		mu   sync.Mutex
		cell = storeCell{op: op.name, clients: n}
		wg   sync.WaitGroup
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
			cell.lat = append(cell.lat, lat...)
			cell.errs += errs
			if cell.firstEr == nil {
				cell.firstEr = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	cell.elapsed = time.Since(start)
	cell.ops = len(cell.lat)
	slices.Sort(cell.lat)
	if err := ctx.Err(); err != nil {
		return cell, err
	}
	// A bench that measured failures would print fiction.
	if cell.errs > 0 {
		return cell, fmt.Errorf("%d of %d requests failed; first: %w", cell.errs, cell.ops, cell.firstEr)
	}
	return cell, nil
}

func writeStoreTable(w io.Writer, store string, size int, d time.Duration, cells []storeCell) {
	fmt.Fprintf(w, "Store: %s\nBody: %d bytes; each row ran %v in a closed loop per client\n\n", store, size, d)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tCLIENTS\tREQUESTS\tOPS/S\tP50\tP99\t")
	for _, r := range cells {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t\n", r.op, r.clients, r.ops, r.opsPerSec(), benchLatency(r.quantile(0.50)), benchLatency(r.quantile(0.99)))
	}
	tw.Flush()
}

// benchLatency prints microseconds to a tenth below a millisecond, where a
// local store's requests fall.
func benchLatency(d time.Duration) string {
	if d >= time.Millisecond {
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}

// removeBenchKeys deletes every key under c, 16 at a time.
func removeBenchKeys(ctx context.Context, c *blobstore.Container) error {
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
