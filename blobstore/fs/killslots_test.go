//go:build unix

package fs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shardfence/shardfence/blobstore"
)

// counterBody is the body of counter value v: about 2 KiB in which every
// byte depends on v, so a body mixed from two versions shows.
func counterBody(v int) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "%08d|", v), 230)
}

func counterValue(b []byte) (int, bool) {
	if len(b) < 9 {
		return 0, false
	}
	v, err := strconv.Atoi(string(b[:8]))
	return v, err == nil && bytes.Equal(b, counterBody(v))
}

// monoNow is CLOCK_MONOTONIC, comparable between processes of one host.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// killIncrement advances the counter by CAS for ever, printing "ack V T"
// with T taken after each acknowledgement.
func killIncrement(ctx context.Context, c testStore, key string) error {
	for {
		obj, err := c.Get(ctx, key)
		if err != nil {
			return err
		}
		v, ok := counterValue(obj.Body)
		if !ok {
			return fmt.Errorf("torn counter: %d bytes starting %.20q", len(obj.Body), obj.Body)
		}
		_, err = c.CompareAndSwap(ctx, key, obj.Token, counterBody(v+1))
		if errors.Is(err, blobstore.ErrPreconditionFailed) {
			continue
		}
		if err != nil {
			return err
		}
		fmt.Printf("ack %d %d\n", v+1, monoNow())
	}
}

// killRead reads the counter until stdin closes, printing "read T V" with
// T taken before each read began, and fails on a torn body.
func killRead(ctx context.Context, c testStore, key string) error {
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		t0 := monoNow()
		obj, err := c.Get(ctx, key)
		if err != nil {
			return err
		}
		v, ok := counterValue(obj.Body)
		if !ok {
			return fmt.Errorf("torn counter: %d bytes starting %.20q", len(obj.Body), obj.Body)
		}
		fmt.Fprintf(w, "read %d %d\n", t0, v)
		time.Sleep(50 * time.Microsecond)
	}
}

// Writers in two processes advance one slot-file counter by CAS and are
// killed (SIGKILL) at random moments and restarted, while two reader
// processes read it throughout. No reader may see a torn body, a value
// older than one acknowledged before its read began, or values going
// back; no value may be acknowledged twice (the flock keeps writers of
// different processes apart); the final value is at least the highest
// acknowledged.
func TestKilledSlotWritersAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	c, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	const key = "fence/counter"
	if _, err := c.CreateIfAbsent(t.Context(), key, counterBody(0)); err != nil {
		t.Fatal(err)
	}
	rounds := 12
	if testing.Short() {
		rounds = 4
	}
	type ack struct{ v, t int64 }
	var acks []ack
	seen := map[int64]bool{}
	collect := func(ch *child) {
		for l := range ch.lines {
			f := strings.Fields(l)
			if len(f) != 3 || f[0] != "ack" {
				t.Errorf("writer said %q", l)
				continue
			}
			v, _ := strconv.ParseInt(f[1], 10, 64)
			at, _ := strconv.ParseInt(f[2], 10, 64)
			if seen[v] {
				t.Errorf("value %d acknowledged twice", v)
			}
			seen[v] = true
			acks = append(acks, ack{v, at})
		}
	}
	readers := startTogether(t, 2, "kill-read", dir, key, 0)
	readOut := make([]chan []string, len(readers))
	for i, r := range readers {
		readOut[i] = make(chan []string, 1)
		go func() {
			var ls []string
			for l := range r.lines {
				ls = append(ls, l)
			}
			readOut[i] <- ls
		}()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for round := range rounds {
		ws := startTogether(t, 2, "kill-incr", dir, key, 0)
		done := make(chan struct{})
		go func() {
			for _, w := range ws {
				collect(w)
			}
			close(done)
		}()
		time.Sleep(time.Duration(5+rng.IntN(40)) * time.Millisecond)
		for _, w := range ws {
			if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
		}
		<-done
		for _, w := range ws {
			_ = w.cmd.Wait()
			if s := w.errb.String(); s != "" {
				t.Fatalf("round %d: writer: %s", round, s)
			}
		}
	}
	for _, r := range readers {
		r.stdin.Close()
	}
	var reads [][]string
	for i, r := range readers {
		reads = append(reads, <-readOut[i])
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("reader: %v: %s", err, r.errb.String())
		}
	}
	if len(acks) == 0 {
		t.Fatal("no CAS was acknowledged")
	}
	nReads := 0
	for _, ls := range reads {
		last := int64(-1)
		for _, l := range ls {
			f := strings.Fields(l)
			if len(f) != 3 || f[0] != "read" {
				t.Fatalf("reader said %q", l)
			}
			t0, _ := strconv.ParseInt(f[1], 10, 64)
			v, _ := strconv.ParseInt(f[2], 10, 64)
			for _, a := range acks {
				if a.t < t0 && a.v > v {
					t.Fatalf("a read begun at %d returned %d, but %d was acknowledged at %d", t0, v, a.v, a.t)
				}
			}
			if v < last {
				t.Fatalf("a reader saw %d after %d", v, last)
			}
			last = v
			nReads++
		}
	}
	maxAck := int64(0)
	for _, a := range acks {
		maxAck = max(maxAck, a.v)
	}
	obj := mustGet(t, c, key)
	v, ok := counterValue(obj.Body)
	if !ok || int64(v) < maxAck {
		t.Fatalf("final counter %d (whole: %v), highest acknowledged %d", v, ok, maxAck)
	}
	t.Logf("%d rounds: %d acknowledged CAS, %d reads checked, final value %d", rounds, len(acks), nReads, v)
}
