package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shardfence/shardfence/e2e/internal/containers"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// The local cluster of `make cluster` (scripts/cluster: MinIO, a master
// and a standby, three sidecars and three kv primaries, all in containers
// from the locally built images) runs one failover with no acknowledged
// write lost: keys written through the kv processes, the sidecar that owns
// a shard killed (`docker kill`), its shards taken over by the others, and
// every acknowledged value read back, through the kv processes, after it.
func TestLocalClusterFailover(t *testing.T) {
	image := shardfenceImage(t)
	minioImage := containers.DefaultMinIOImage
	if v := os.Getenv(containers.MinIOImageEnv); v != "" {
		minioImage = v
	}
	if err := exec.Command("docker", "image", "inspect", minioImage).Run(); err != nil {
		testservers.Unavailable(t, "the MinIO test image", fmt.Errorf("%s is not in the engine (`make test-images` builds it): %v", minioImage, err))
	}
	base := freePortRange(t, 40)
	root := moduleRoot(t)
	script := filepath.Join(root, "scripts", "cluster")
	env := append(os.Environ(), "SHARDFENCE_IMAGE="+image, "SHARDFENCE_MINIO_IMAGE="+minioImage,
		"SHARDFENCE_CLUSTER_DIR="+filepath.Join(t.TempDir(), "cluster"), "SHARDFENCE_CLUSTER_PORT="+strconv.Itoa(base))
	cluster := func(ctx context.Context, arg string) (string, error) {
		cmd := exec.CommandContext(ctx, script, arg)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []string{"m1", "m2", "n1", "n2", "n3", "kv1", "kv2", "kv3"} {
				out, _ := exec.Command("docker", "logs", "--tail", "15", "sf-cluster-"+c).CombinedOutput()
				t.Logf("sf-cluster-%s log (tail):\n%s", c, out)
			}
		}
		if out, err := cluster(context.Background(), "down"); err != nil {
			t.Errorf("scripts/cluster down: %v\n%s", err, out)
		}
	})
	if out, err := cluster(ctx, "up"); err != nil {
		t.Fatalf("scripts/cluster up: %v\n%s", err, out)
	}
	kvs := []string{}
	for i := 1; i <= 3; i++ {
		kvs = append(kvs, fmt.Sprintf("http://127.0.0.1:%d", base+30+i))
	}
	masters := fmt.Sprintf("http://127.0.0.1:%d,http://127.0.0.1:%d", base+10, base+11)

	acked := map[string]string{}
	for i := range 30 {
		key, val := fmt.Sprintf("key-%d", i), fmt.Sprintf("v%d-%d", i, time.Now().UnixNano())
		if kvDo(t, ctx, kvs, http.MethodPut, key, val) {
			acked[key] = val
		}
	}
	if len(acked) < 30 {
		t.Fatalf("%d of 30 writes acknowledged before the failover", len(acked))
	}

	shards := func() []shardRow {
		out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "host", image, "master", "shards", "--json", "--addr", masters).Output()
		if err != nil {
			return nil
		}
		var doc struct {
			Shards []shardRow `json:"shards"`
		}
		if json.Unmarshal(out, &doc) != nil {
			return nil
		}
		return doc.Shards
	}
	var victim string
	for _, s := range shards() {
		if s.State == "open" {
			victim = s.Assignment.Node
			break
		}
	}
	if victim == "" {
		t.Fatalf("no open shard before the failover: %+v", shards())
	}
	if err := exec.CommandContext(ctx, "docker", "kill", "sf-cluster-"+victim).Run(); err != nil {
		t.Fatalf("docker kill sf-cluster-%s: %v", victim, err)
	}
	t.Logf("killed the sidecar %s", victim)
	start := time.Now()
	for {
		moved := true
		ss := shards()
		for _, s := range ss {
			moved = moved && s.State == "open" && s.Assignment.Node != victim
		}
		if moved && len(ss) == 3 {
			t.Logf("every shard open on a live node %v after the kill", time.Since(start).Round(time.Millisecond))
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the shards did not move off %s: %+v", victim, ss)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for key, want := range acked {
		if got, ok := kvGet(t, ctx, kvs, key); !ok || got != want {
			t.Errorf("after the failover %s = %q (read %v), want the acknowledged %q", key, got, ok, want)
		}
	}
	if !kvDo(t, ctx, kvs, http.MethodPut, "after", "failover") {
		t.Error("no write acknowledged after the failover")
	}
}

type shardRow struct {
	Assignment struct {
		Shard string `json:"shard"`
		Node  string `json:"node"`
		Term  string `json:"term"`
	} `json:"assignment"`
	State string `json:"state"`
}

// kvDo sends a write of key to whichever kv process serves its shard,
// trying each until one acknowledges (200) or the context ends; 421 (not
// here), 503 and connection errors move on; 504 (outcome unknown) is not
// counted as acknowledged.
func kvDo(t *testing.T, ctx context.Context, kvs []string, method, key, value string) bool {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"value": value})
	for ctx.Err() == nil {
		for _, kv := range kvs {
			req, _ := http.NewRequestWithContext(ctx, method, kv+"/v1/kv/"+key, bytes.NewReader(body))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			switch res.StatusCode {
			case http.StatusOK:
				return true
			case http.StatusGatewayTimeout:
				return false
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// kvGet reads key through whichever kv process serves its shard.
func kvGet(t *testing.T, ctx context.Context, kvs []string, key string) (string, bool) {
	t.Helper()
	for ctx.Err() == nil {
		for _, kv := range kvs {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, kv+"/v1/kv/"+key, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			var doc struct {
				Value string `json:"value"`
				Found bool   `json:"found"`
			}
			err = json.NewDecoder(res.Body).Decode(&doc)
			res.Body.Close()
			if res.StatusCode == http.StatusOK && err == nil {
				return doc.Value, doc.Found
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", false
}

// freePortRange is a base port whose next n ports on 127.0.0.1 were all
// free a moment ago.
func freePortRange(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := 20000 + rand.IntN(30000)
		free := true
		for p := base; p < base+n && free; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				free = false
				continue
			}
			l.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no range of free ports")
	return 0
}
