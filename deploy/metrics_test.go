package deploy

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
)

// Every metric a rule of prometheus/rules.yml or a panel of
// grafana/shardfence.json names is exported by the binary: a primary
// master and a standby on a store, two sidecars that join them, a shard
// assigned to one and appended to, the other killed so the master sees it
// suspected and offline; their /metrics, scraped, name every one. A metric
// renamed in code (or a typo in a rule or a panel) fails here.
func TestEveryNamedMetricIsExported(t *testing.T) {
	want := namedMetrics(t)
	if len(want) < 20 {
		t.Fatalf("rules and dashboard name only %d metrics", len(want))
	}
	bin := buildBinaries(t)
	cmd := sidecarproc.Command{Path: bin.shardfence}
	dir := t.TempDir()
	mstore := "file://" + filepath.Join(dir, "masters")
	sstore := "file://" + filepath.Join(dir, "shards")
	flags := []string{"--client-active-ttl", "1s", "--client-suspicion-ttl", "1s", "--election-timeout", "1s", "--snapshot-interval", "0", "--shards", "16"}
	m1 := sidecarproc.StartMaster(t, cmd, "m1", "metrics", "127.0.0.1:0", mstore, flags...)
	m2 := sidecarproc.StartMaster(t, cmd, "m2", "metrics", "127.0.0.1:0", mstore, append([]string{"--standby"}, flags...)...)
	masters := "http://" + m1.Addr + ",http://" + m2.Addr
	n1 := sidecarproc.Start(t, cmd, "n1", sstore, "--master", masters)
	n2 := sidecarproc.Start(t, cmd, "n2", sstore, "--master", masters)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	until(t, ctx, "the shard assigned to n1", func() bool {
		return exec.CommandContext(ctx, bin.shardfence, "master", "assign", "--addr", masters, "--shard", "s1", "--node", "n1", "--timeout", "5s").Run() == nil
	})
	until(t, ctx, "an append to s1 on n1", func() bool {
		return n1.Append(ctx, "s1", []byte("a"), []byte("b")) == nil
	})
	for i := range 20 {
		if err := n1.Append(ctx, "s1", []byte{byte(i)}); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	n2.Kill() // suspected, then offline, at the master

	seen := map[string]bool{}
	var missing []string
	for {
		for _, addr := range []string{n1.Addr, m1.Addr, m2.Addr} {
			for name := range exportedNames(get(ctx, "http://"+addr+"/metrics")) {
				seen[name] = true
			}
		}
		missing = missing[:0]
		for name := range want {
			if !seen[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	slices.Sort(missing)
	for _, name := range missing {
		t.Errorf("%s is named by %s but no sidecar or master exports it", name, strings.Join(slices.Compact(want[name]), ", "))
	}
}

func until(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func get(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
