package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// On a sidecar whose shards its master assigns, a call on a shard that is
// not open there points to the master's table (which names the owner),
// not to Open; a sidecar without a master still says to open the shard.
func TestNotOpenAdviceUnderAMaster(t *testing.T) {
	dir := t.TempDir()
	m := startMasterProc(t, "m1", "file://"+filepath.Join(dir, "masters"))
	m.waitReady(t)
	managed, _ := startServe(t, "--store", "file://"+filepath.Join(dir, "shards"), "--listen", "127.0.0.1:0", "--node", "n1", "--master", m.url)
	alone, _ := startServe(t, "--store", "file://"+filepath.Join(dir, "alone"), "--listen", "127.0.0.1:0")

	hint := "`shardfence master shards --addr " + m.url + "` shows which node owns it"
	for _, args := range [][]string{
		{"status", "--addr", managed, "--shard", "s9"},
		{"append", "--addr", managed, "--shard", "s9", "--op", "x"},
	} {
		r := cli(t, "", args...)
		if r.code != 1 || !strings.Contains(r.stderr, hint) || strings.Contains(r.stderr, "Open(shard") || !strings.HasSuffix(r.stderr, "[not_open]\n") {
			t.Errorf("%s on a sidecar under a master: exit %d, %q; want [not_open] naming %s", args[0], r.code, r.stderr, hint)
		}
	}
	// The command the advice names runs against that master.
	if r := cli(t, "", "master", "shards", "--addr", m.url); r.code != 0 {
		t.Errorf("master shards: exit %d, %s", r.code, r.stderr)
	}
	for _, args := range [][]string{
		{"status", "--addr", alone, "--shard", "s9"},
		{"append", "--addr", alone, "--shard", "s9", "--op", "x"},
	} {
		r := cli(t, "", args...)
		if r.code != 1 || !strings.Contains(r.stderr, "open it first with Open(shard, term, allocation)") || strings.Contains(r.stderr, "master shards") {
			t.Errorf("%s on a sidecar without a master: exit %d, %q", args[0], r.code, r.stderr)
		}
	}
}

// watchProc runs `shardfence watch` in-process until stop; its stdout is
// read while it runs.
type watchProc struct {
	out, errOut syncBuffer
	cancel      context.CancelFunc
	code        chan int
}

func startWatch(args ...string) *watchProc {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchProc{cancel: cancel, code: make(chan int, 1)}
	go func() { w.code <- dispatch(ctx, append([]string{"watch"}, args...), &w.out, &w.errOut) }()
	return w
}

// waitLine waits for a line of the watch's stdout that contains every
// part, and returns it.
func (w *watchProc) waitLine(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, line := range strings.Split(w.out.String(), "\n") {
			all := line != ""
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return line
			}
		}
		select {
		case code := <-w.code:
			t.Fatalf("watch exited %d before a line with %q\nstdout:\n%s\nstderr:\n%s", code, parts, w.out.String(), w.errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no watch line with %q\nstdout:\n%s\nstderr:\n%s", parts, w.out.String(), w.errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop interrupts the watch (as Ctrl-C does) and returns its exit code.
func (w *watchProc) stop(t *testing.T) int {
	t.Helper()
	w.cancel()
	select {
	case code := <-w.code:
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("watch did not stop")
		return -1
	}
}

// status without --shard lists the shards open (or fenced) on a sidecar,
// and watch prints its feed: the shards open when it began, then every
// shard gained, fenced and lost, one line (or one JSON object) each.
func TestStatusListsShardsAndWatchFollowsTheFeed(t *testing.T) {
	dir := t.TempDir()
	store := "file://" + filepath.Join(dir, "shards")
	a, _ := startServe(t, "--store", store, "--listen", "127.0.0.1:0", "--node", "a")
	b, _ := startServe(t, "--store", store, "--listen", "127.0.0.1:0", "--node", "b")

	if r := cli(t, "", "status", "--addr", a); r.code != 0 || r.stdout != "no shard is open on this sidecar\n" {
		t.Fatalf("status of an empty sidecar: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	if r := cli(t, "", "open", "--addr", a, "--shard", "s0", "--term", "3", "--allocation", "a3"); r.code != 0 {
		t.Fatalf("open s0: %d %s", r.code, r.stderr)
	}
	w := startWatch("--addr", a)
	wj := startWatch("--addr", a, "--json")
	w.waitLine(t, "GAINED", "s0 term 3 allocation a3", "(open when the watch began)")
	w.waitLine(t, "SYNCED")
	wj.waitLine(t, `"kind":"WATCH_EVENT_KIND_SYNCED"`)

	for _, sh := range []string{"s1", "s2"} {
		if r := cli(t, "", "open", "--addr", a, "--shard", sh, "--term", "1", "--allocation", "a1"); r.code != 0 {
			t.Fatalf("open %s: %d %s", sh, r.code, r.stderr)
		}
	}
	if r := cli(t, "", "append", "--addr", a, "--shard", "s1", "--op", "x", "--op", "y"); r.code != 0 {
		t.Fatalf("append: %d %s", r.code, r.stderr)
	}
	w.waitLine(t, "GAINED", "s1 term 1 allocation a1")
	w.waitLine(t, "GAINED", "s2 term 1 allocation a1")

	r := cli(t, "", "status", "--addr", a)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 4 {
		t.Fatalf("status list: exit %d, %q, %q", r.code, r.stdout, r.stderr)
	}
	for i, want := range []string{"SHARD TERM STATE GEN NEXT SEQ ALLOCATION FENCED", "s0 3 open 0 0 a3 no", "s1 1 open 1 2 a1 no", "s2 1 open 0 0 a1 no"} {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want {
			t.Errorf("status list line %d: %q, want %q", i, got, want)
		}
	}
	r = cli(t, "", "status", "--addr", a, "--json")
	var js []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("status --json line %q: %v", line, err)
		}
		js = append(js, m)
	}
	if r.code != 0 || len(js) != 3 || js[1]["shard"] != "s1" || js[1]["term"] != "1" || js[1]["gen"] != "1" || js[1]["state"] != "open" {
		t.Fatalf("status --json list: exit %d, %v", r.code, js)
	}

	// b takes s1 at term 2: a's next append is fenced, and both say so.
	if r := cli(t, "", "open", "--addr", b, "--shard", "s1", "--term", "2", "--allocation", "b2"); r.code != 0 {
		t.Fatalf("open s1 on b: %d %s", r.code, r.stderr)
	}
	if r := cli(t, "", "append", "--addr", a, "--shard", "s1", "--op", "z"); r.code != 1 || !strings.Contains(r.stderr, "[fenced]") {
		t.Fatalf("append on the fenced a: exit %d, %q", r.code, r.stderr)
	}
	w.waitLine(t, "FENCED", "s1 term 1", "by term 2")
	if r := cli(t, "", "close", "--addr", a, "--shard", "s2"); r.code != 0 {
		t.Fatalf("close s2: %d %s", r.code, r.stderr)
	}
	w.waitLine(t, "LOST", "s2 term 1", "reason closed")
	wj.waitLine(t, `"kind":"WATCH_EVENT_KIND_LOST"`, `"shard":"s2"`, `"reason":"closed"`)
	wj.waitLine(t, `"kind":"WATCH_EVENT_KIND_FENCED"`, `"shard":"s1"`, `"successor_term":"2"`)
	for _, line := range strings.Split(strings.TrimSpace(wj.out.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("watch --json line is not JSON: %q", line)
		}
	}
	if r := cli(t, "", "status", "--addr", a); !strings.Contains(r.stdout, "fenced") || !strings.Contains(r.stdout, "by term 2") || strings.Contains(r.stdout, "s2") {
		t.Errorf("status list after the fence and the close: %q", r.stdout)
	}
	if code := w.stop(t); code != 0 {
		t.Errorf("watch exit %d after an interrupt; stderr %q", code, w.errOut.String())
	}
	if code := wj.stop(t); code != 0 {
		t.Errorf("watch --json exit %d after an interrupt; stderr %q", code, wj.errOut.String())
	}

	// --shard limits the feed.
	ws := startWatch("--addr", a, "--shard", "s0", "--timeout", "30s")
	ws.waitLine(t, "SYNCED")
	if out := ws.out.String(); !strings.Contains(out, "s0 term 3") || strings.Contains(out, "s1 ") {
		t.Errorf("watch --shard s0: %q", out)
	}
	ws.stop(t)
}

// startMasterLogs runs the master command in-process until the test ends
// and returns its URL, a stop function and its log.
func startMasterLogs(t *testing.T, args ...string) (string, func() error, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	errOut := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- runMaster(ctx, append([]string{"--listen", "127.0.0.1:0"}, args...), &out, errOut) }()
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if a, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "master listening on "); ok {
			addr = a
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("master exited early: %v; stderr: %s", err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("master did not report its address; stderr: %s", errOut.String())
		}
	}
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() { cancel(); stopErr = <-done })
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	return "http://" + addr, stop, errOut
}

// The master reads its --store's conformance certificate as serve does:
// on a store conformance never ran on it warns (and says so in
// shardfence_master_store_certificate); once `shardfence conformance`
// certified that store URL, a master there says it is certified and
// warns no more (certified by the fencing suite alone, as in
// TestStoreCertificateMetric).
func TestMasterReadsTheStoreCertificate(t *testing.T) {
	store := "file://" + t.TempDir()
	url, stop, logs := startMasterLogs(t, "--store", store, "--cluster", "cert", "--snapshot-interval", "0")
	if !strings.Contains(logs.String(), "store not certified for fencing") || !strings.Contains(logs.String(), "the master refuses a store that fails a fencing check") {
		t.Errorf("a master on an uncertified store does not warn:\n%s", logs)
	}
	if body := scrape(t, url+"/metrics"); !strings.Contains(body, MasterStoreCertificateMetric+`{state="missing"} 1`) {
		t.Errorf("uncertified: /metrics says\n%s", grepLines(body, MasterStoreCertificateMetric))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "conformance", "--store", store, "--fencing-only"); code != 0 {
		t.Fatalf("conformance: exit %d\n%s\n%s", code, out, errOut)
	}
	url, _, logs = startMasterLogs(t, "--store", store, "--cluster", "cert", "--snapshot-interval", "0")
	if strings.Contains(logs.String(), "not certified") || !strings.Contains(logs.String(), "store certified for fencing") {
		t.Errorf("a master on a certified store:\n%s", logs)
	}
	if body := scrape(t, url+"/metrics"); !strings.Contains(body, MasterStoreCertificateMetric+`{state="certified"} 1`) {
		t.Errorf("certified: /metrics says\n%s", grepLines(body, MasterStoreCertificateMetric))
	}
}
