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
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// The cross-process tests re-run this test binary as child processes; the
// role variable tells TestMain to play a child instead of running tests.
const (
	envRole = "SHARDFENCE_FS_TEST_ROLE"
	envDir  = "SHARDFENCE_FS_TEST_DIR"
	envKey  = "SHARDFENCE_FS_TEST_KEY"
	envN    = "SHARDFENCE_FS_TEST_N"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := runChild(role); err != nil {
			fmt.Fprintf(os.Stderr, "child %s (pid %d): %v\n", role, os.Getpid(), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild opens the store, says "ready", waits for a line on stdin so that
// all children start together, then plays its role, reporting on stdout.
func runChild(role string) error {
	ctx := context.Background()
	c, err := openTest(os.Getenv(envDir))
	if err != nil {
		return err
	}
	key := os.Getenv(envKey)
	n, _ := strconv.Atoi(os.Getenv(envN))
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for go: %w", err)
	}
	switch role {
	case "increment":
		attempts := 0
		for done := 0; done < n; attempts++ {
			obj, err := c.Get(ctx, key)
			if err != nil {
				return err
			}
			v, err := strconv.Atoi(string(obj.Body))
			if err != nil {
				return fmt.Errorf("counter holds %q", obj.Body)
			}
			tok, err := c.CompareAndSwap(ctx, key, obj.Token, []byte(strconv.Itoa(v+1)))
			if errors.Is(err, blobstore.ErrPreconditionFailed) {
				continue
			}
			if err != nil {
				return err
			}
			done++
			fmt.Printf("tok %s %d\n", tok, v+1)
		}
		fmt.Printf("done %d\n", attempts)
	case "create":
		for i := range n {
			k := fmt.Sprintf("%s-%d", key, i)
			tok, err := c.CreateIfAbsent(ctx, k, fmt.Appendf(nil, "winner %d", os.Getpid()))
			switch {
			case err == nil:
				fmt.Printf("won %s %d %s\n", k, os.Getpid(), tok)
			case errors.Is(err, blobstore.ErrAlreadyExists):
				fmt.Printf("lost %s\n", k)
			default:
				return err
			}
		}
		fmt.Println("done")
	case "create-hold":
		// Creates keys until killed, with the create log's checkpoint
		// put off, so its records stay in the log for other processes
		// to deal with.
		c.b.checkpointAfter = time.Hour
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s-%d", key, i)
			tok, err := c.CreateIfAbsent(ctx, k, fmt.Appendf(nil, "by %d", os.Getpid()))
			if err != nil {
				return err
			}
			fmt.Printf("won %s %s\n", k, tok)
		}
	case "hang-create", "hang-put":
		// Stop for good once the temporary file is durable, as a writer
		// that is killed just before publishing.
		c.b.hook = func(stage string) {
			if stage == "temp-synced" {
				fmt.Println("blocked")
				time.Sleep(time.Hour)
			}
		}
		// Larger than a slot file holds: the path through a temporary
		// file renamed into place.
		body := bytes.Repeat([]byte("from a writer that will be killed "), 4000)
		if role == "hang-create" {
			_, err = c.CreateIfAbsent(ctx, key, body)
		} else {
			_, err = c.Put(ctx, key, body)
		}
		return fmt.Errorf("write returned (%v) although the hook blocks it", err)
	case "churn":
		// Large bodies keep the writer inside write and fsync most of the
		// time, where the parent's kill lands.
		for i := 1; ; i++ {
			if _, err := c.Put(ctx, key, churnBody(i)); err != nil {
				return err
			}
			fmt.Printf("put %d\n", i)
		}
	case "kill-incr":
		return killIncrement(ctx, c, key)
	case "kill-read":
		return killRead(ctx, c, key)
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	return nil
}

func churnBody(i int) []byte {
	return bytes.Repeat([]byte{byte(i)}, 4<<20)
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	errb  *bytes.Buffer
}

func startChild(t *testing.T, role, dir, key string, n int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envDir+"="+dir, envKey+"="+key, envN+"="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1024), errb: &bytes.Buffer{}}
	cmd.Stderr = ch.errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
		close(ch.lines)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return ch
}

// next returns the child's next stdout line.
func (ch *child) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-ch.lines:
		if !ok {
			_ = ch.cmd.Wait()
			t.Fatalf("child %d ended early: %s", ch.cmd.Process.Pid, ch.errb.String())
		}
		return l
	case <-time.After(2 * time.Minute):
		t.Fatalf("child %d silent for 2 minutes: %s", ch.cmd.Process.Pid, ch.errb.String())
	}
	return ""
}

func (ch *child) expect(t *testing.T, want string) {
	t.Helper()
	if l := ch.next(t); l != want {
		t.Fatalf("child %d said %q, want %q; stderr: %s", ch.cmd.Process.Pid, l, want, ch.errb.String())
	}
}

// startTogether starts children of one role, waits until each has opened the
// store, then releases them at once.
func startTogether(t *testing.T, procs int, role, dir, key string, n int) []*child {
	t.Helper()
	var kids []*child
	for range procs {
		kids = append(kids, startChild(t, role, dir, key, n))
	}
	for _, k := range kids {
		k.expect(t, "ready")
	}
	for _, k := range kids {
		if _, err := io.WriteString(k.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	return kids
}

// wait reads the child's lines until it exits, and requires a clean exit.
func (ch *child) wait(t *testing.T) []string {
	t.Helper()
	var out []string
	for l := range ch.lines {
		out = append(out, l)
	}
	if err := ch.cmd.Wait(); err != nil {
		t.Fatalf("child %d: %v: %s", ch.cmd.Process.Pid, err, ch.errb.String())
	}
	return out
}

// The get-then-CAS race of the conformance suite, between processes: the
// counter must end at exactly the number of successful CAS calls, and every
// success must have returned a new token.
func TestCrossProcessCASIncrements(t *testing.T) {
	const procs, each = 4, 25
	dir := t.TempDir()
	c, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateIfAbsent(t.Context(), "counter", []byte("0")); err != nil {
		t.Fatal(err)
	}
	kids := startTogether(t, procs, "increment", dir, "counter", each)
	tokens := map[string]bool{}
	values := map[string]bool{}
	attempts := 0
	for _, k := range kids {
		for _, l := range k.wait(t) {
			f := strings.Fields(l)
			switch {
			case len(f) == 3 && f[0] == "tok":
				if tokens[f[1]] || values[f[2]] {
					t.Fatalf("token %s or value %s returned by two successful CAS calls", f[1], f[2])
				}
				tokens[f[1]], values[f[2]] = true, true
			case len(f) == 2 && f[0] == "done":
				n, _ := strconv.Atoi(f[1])
				attempts += n
			default:
				t.Fatalf("child said %q", l)
			}
		}
	}
	obj := mustGet(t, c, "counter")
	if string(obj.Body) != strconv.Itoa(procs*each) || len(tokens) != procs*each {
		t.Fatalf("counter is %s with %d successful CAS calls; want %d", obj.Body, len(tokens), procs*each)
	}
	if !tokens[string(obj.Token)] {
		t.Fatalf("final token %s was not returned by any CAS", obj.Token)
	}
	t.Logf("%d processes x %d increments took %d attempts", procs, each, attempts)
}

func TestCrossProcessCreateRace(t *testing.T) {
	const procs, keys = 6, 5
	dir := t.TempDir()
	kids := startTogether(t, procs, "create", dir, "race", keys)
	winners := map[string][]string{} // key -> "pid token"
	for _, k := range kids {
		for _, l := range k.wait(t) {
			f := strings.Fields(l)
			switch {
			case len(f) == 4 && f[0] == "won":
				winners[f[1]] = append(winners[f[1]], f[2]+" "+f[3])
			case len(f) == 2 && f[0] == "lost", l == "done":
			default:
				t.Fatalf("child said %q", l)
			}
		}
	}
	c, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		k := fmt.Sprintf("race-%d", i)
		if len(winners[k]) != 1 {
			t.Fatalf("key %s: %d winners %q, want exactly 1", k, len(winners[k]), winners[k])
		}
		pid, tok, _ := strings.Cut(winners[k][0], " ")
		obj := mustGet(t, c, k)
		if string(obj.Body) != "winner "+pid || string(obj.Token) != tok {
			t.Fatalf("key %s holds %q %s; the winner was pid %s with token %s", k, obj.Body, obj.Token, pid, tok)
		}
	}
}

// A writer killed after its temporary file is durable but before it is
// published leaves the key as it was; Open keeps a live writer's temporary
// file and removes a dead one's.
func TestKilledWriterLeavesNoVisibleObject(t *testing.T) {
	for _, role := range []string{"hang-create", "hang-put"} {
		t.Run(role, func(t *testing.T) {
			dir := t.TempDir()
			tmp := filepath.Join(dir, tmpDir)
			c, err := openTest(dir)
			if err != nil {
				t.Fatal(err)
			}
			var before blobstore.Token
			if role == "hang-put" {
				before = mustPut(t, c, "k", "acknowledged")
			}
			kid := startTogether(t, 1, role, dir, "k", 0)[0]
			kid.expect(t, "blocked")
			if n := countFiles(t, tmp); n != 1 {
				t.Fatalf("%d temporary files while the writer is blocked, want 1", n)
			}
			if _, err := openTest(dir); err != nil { // cleans up, must spare the live writer
				t.Fatal(err)
			}
			if n := countFiles(t, tmp); n != 1 {
				t.Fatalf("Open removed a live writer's temporary file (%d left)", n)
			}

			if err := kid.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = kid.cmd.Wait()

			checkKey := func(when string) {
				t.Helper()
				obj, err := c.Get(t.Context(), "k")
				if role == "hang-create" {
					if !errors.Is(err, blobstore.ErrNotFound) {
						t.Fatalf("%s: Get = %q, %v; want ErrNotFound", when, obj.Body, err)
					}
					return
				}
				if err != nil || string(obj.Body) != "acknowledged" || obj.Token != before {
					t.Fatalf("%s: Get = %q %s, %v; want the acknowledged version", when, obj.Body, obj.Token, err)
				}
			}
			checkKey("after the kill")
			if n := countFiles(t, tmp); n != 1 {
				t.Fatalf("%d temporary files after the kill, want the dead writer's 1", n)
			}
			if _, err := openTest(dir); err != nil {
				t.Fatal(err)
			}
			if n := countFiles(t, tmp); n != 0 {
				t.Fatalf("Open left %d temporary files of a dead writer", n)
			}
			checkKey("after cleanup")
			if _, err := c.CreateIfAbsent(t.Context(), "k2", []byte("x")); err != nil {
				t.Fatalf("store unusable after cleanup: %v", err)
			}
		})
	}
}

// A writer killed at an arbitrary point while writing large bodies leaves
// the key at one whole version: never a torn or partial body.
func TestKilledWriterMidWrite(t *testing.T) {
	dir := t.TempDir()
	for round := range 3 {
		kid := startTogether(t, 1, "churn", dir, "big", 0)[0]
		for range 2 {
			if l := kid.next(t); !strings.HasPrefix(l, "put ") {
				t.Fatalf("child said %q", l)
			}
		}
		time.Sleep(time.Duration(round*7) * time.Millisecond)
		if err := kid.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = kid.cmd.Wait()

		c, err := openTest(dir)
		if err != nil {
			t.Fatal(err)
		}
		obj := mustGet(t, c, "big")
		if len(obj.Body) == 0 || !bytes.Equal(obj.Body, churnBody(int(obj.Body[0]))) {
			t.Fatalf("round %d: after the kill the object is %d bytes, not one whole version", round, len(obj.Body))
		}
		if n := countFiles(t, filepath.Join(dir, tmpDir)); n != 0 {
			t.Fatalf("round %d: %d temporary files left after Open", round, n)
		}
	}
}

// Streams opened while another process keeps replacing the key each return
// exactly one version, whole or ranged, pinned or not, although the key is
// replaced while they are half read.
func TestCrossProcessStreamsSeeOneVersion(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	c, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	kid := startTogether(t, 1, "churn", dir, "big", 0)[0]
	puts := make(chan struct{}, 1)
	go func() {
		for l := range kid.lines {
			if strings.HasPrefix(l, "put ") {
				select {
				case puts <- struct{}{}:
				default:
				}
			}
		}
	}()
	waitPut := func() {
		t.Helper()
		select {
		case <-puts:
		case <-time.After(2 * time.Minute):
			t.Fatalf("the writer made no progress: %s", kid.errb.String())
		}
	}
	waitPut()
	const size = 4 << 20
	for i := range 6 {
		pinned, ranged := i%2 == 1, i >= 4
		var pin blobstore.Token
		if pinned {
			st, err := c.Stat(ctx, "big")
			if err != nil {
				t.Fatal(err)
			}
			pin = st.Token
		}
		off, n := int64(0), int64(-1)
		if ranged {
			off, n = 1<<20, 2<<20
		}
		rc, attrs, err := c.NewRangeReader(ctx, "big", off, n, pin)
		if pinned && errors.Is(err, blobstore.ErrPreconditionFailed) {
			continue // replaced between the Stat and the open
		}
		if err != nil {
			t.Fatal(err)
		}
		if attrs.Size != size || (pinned && attrs.Token != pin) {
			t.Fatalf("stream %d: attrs %+v, want size %d and token %q", i, attrs, size, pin)
		}
		head := make([]byte, 512<<10)
		if _, err := io.ReadFull(rc, head); err != nil {
			t.Fatal(err)
		}
		// A put acknowledged now may have renamed before the open; the
		// one after it renamed after the open, while the stream is half
		// read.
		select {
		case <-puts:
		default:
		}
		waitPut()
		waitPut()
		rest, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("stream %d (pin %q, offset %d): %v", i, pin, off, err)
		}
		_ = rc.Close()
		got := append(head, rest...)
		want := churnBody(int(got[0]))
		if ranged {
			want = want[off : off+n]
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("stream %d (pin %q, offset %d): %d bytes that are not one version's", i, pin, off, len(got))
		}
	}
	if err := kid.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = kid.cmd.Wait()
}

// Two processes create keys through the create log and are SIGKILLed at
// random moments; meanwhile this process deletes some of the keys they
// acknowledged, which must retire their records across processes first.
// Afterwards every acknowledged key not deleted holds its creator's body
// and token, every deleted key is absent, the log holds no record of a
// deleted key, and a new open recovers the log to empty without changing
// any of it.
func TestKilledLoggedCreatorsAcrossProcesses(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	c := openHeld(t, dir)
	kids := []*child{startChild(t, "create-hold", dir, "a", 0), startChild(t, "create-hold", dir, "b", 0)}
	for _, k := range kids {
		k.expect(t, "ready")
	}
	for _, k := range kids {
		if _, err := io.WriteString(k.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	type won struct{ pid, tok string }
	acked := map[string]won{}
	deleted := map[string]bool{}
	deadline := time.Now().Add(time.Duration(300+rand.IntN(400)) * time.Millisecond)
	lines := make(chan string, 1024)
	for _, k := range kids {
		go func(k *child) {
			for l := range k.lines {
				lines <- fmt.Sprintf("%d %s", k.cmd.Process.Pid, l)
			}
		}(k)
	}
	n := 0
	for time.Now().Before(deadline) {
		select {
		case l := <-lines:
			f := strings.Fields(l)
			if len(f) != 4 || f[1] != "won" {
				t.Fatalf("child said %q", l)
			}
			acked[f[2]] = won{pid: f[0], tok: f[3]}
			n++
			if n%3 == 0 {
				if err := c.Delete(ctx, f[2]); err != nil {
					t.Fatalf("delete %s: %v", f[2], err)
				}
				deleted[f[2]] = true
				if held, err := c.b.log.holds(f[2]); err != nil || held {
					t.Fatalf("after deleting %s the log still holds its create (%v, %v)", f[2], held, err)
				}
			}
		case <-time.After(time.Second):
			t.Fatal("children created nothing for a second")
		}
	}
	for _, k := range kids {
		_ = k.cmd.Process.Signal(syscall.SIGKILL)
		_ = k.cmd.Wait()
	}
	// Lines written before the kill still count as acknowledged.
	for {
		select {
		case l := <-lines:
			f := strings.Fields(l)
			if len(f) == 4 && f[1] == "won" {
				acked[f[2]] = won{pid: f[0], tok: f[3]}
			}
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
	t.Logf("%d creates acknowledged, %d of them deleted while the creators ran", len(acked), len(deleted))
	if len(deleted) < 3 || len(acked) < 10 {
		t.Fatalf("too little happened: %d creates acknowledged, %d deleted", len(acked), len(deleted))
	}
	check := func(s testStore, when string) {
		t.Helper()
		for k, w := range acked {
			o, err := s.Get(ctx, k)
			if deleted[k] {
				if !errors.Is(err, blobstore.ErrNotFound) {
					t.Fatalf("%s: deleted %s is back: %v", when, k, err)
				}
				continue
			}
			if err != nil || string(o.Body) != "by "+w.pid || string(o.Token) != w.tok {
				t.Fatalf("%s: %s: %v %q %s, want by %s %s", when, k, err, o.Body, o.Token, w.pid, w.tok)
			}
		}
	}
	check(c, "after the kills")
	after, err := openTest(dir)
	if err != nil {
		t.Fatal(err)
	}
	check(after, "after a new open")
	if n := logRecords(t, after); n != 0 {
		t.Fatalf("after a new open the log holds %d records", n)
	}
}
