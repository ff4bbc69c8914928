package nemesis

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/internal/harness/sidecarproc"
	"github.com/shardfence/shardfence/internal/harness/testservers"
)

// The programs the cluster runs, built once by TestMain.
var shardfenceCmd, kvCmd sidecarproc.Command

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shardfence-nemesis-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, b := range []struct {
		pkg string
		cmd *sidecarproc.Command
	}{{"github.com/shardfence/shardfence/cmd/shardfence", &shardfenceCmd}, {"github.com/shardfence/shardfence/examples/kv", &kvCmd}} {
		out := filepath.Join(dir, filepath.Base(b.pkg))
		if msg, err := exec.Command("go", "build", "-o", out, b.pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", b.pkg, err, msg)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		*b.cmd = sidecarproc.Command{Path: out}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cluster is MinIO, a primary master and a standby, and three nodes, each
// a sidecar and a kv process next to it, all real processes on 127.0.0.1.
type cluster struct {
	t      *testing.T
	minio  *testservers.Process
	store  string // the sidecars' store URL
	mstore string // the masters' store URL
	broken string // the kv processes' --broken

	mu      sync.Mutex
	masters map[string]*sidecarproc.Proc
	mports  map[string]int
	nodes   []*node
}

type node struct {
	name            string
	sidecarPort     int
	kvPort          int
	dataDir         string
	sidecar, kvproc *sidecarproc.Proc
}

const (
	numShards       = 3
	electionTimeout = "1s"
	clientTTL       = "1s"
)

func startCluster(t *testing.T, broken string) *cluster {
	t.Helper()
	ports, err := testservers.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testservers.Tool("minio")
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	l := testservers.MinIOLaunch(filepath.Join(t.TempDir(), "minio"), ports[0], ports[1])
	mp, err := testservers.Start(t, "minio", bin, l.Args, l.Env, testservers.HTTPReady(l.Server.Endpoint()+l.ReadyPath), 60*time.Second)
	if err != nil {
		testservers.Unavailable(t, "MinIO", err)
	}
	if err := l.Server.MakeBucket(); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, minio: mp, store: l.Server.MinioURL("kv"), mstore: l.Server.MinioURL("masters"), broken: broken,
		masters: map[string]*sidecarproc.Proc{}, mports: map[string]int{}}
	for _, m := range []string{"m1", "m2"} {
		p, err := testservers.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		c.mports[m] = p
	}
	c.startMaster("m1", false)
	c.startMaster("m2", true)
	for i := 1; i <= 3; i++ {
		p, err := testservers.FreePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		n := &node{name: fmt.Sprintf("n%d", i), sidecarPort: p[0], kvPort: p[1], dataDir: t.TempDir()}
		c.nodes = append(c.nodes, n)
		c.startSidecar(n)
		c.startKV(n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for i := range numShards {
		shard := fmt.Sprintf("kv-%d", i)
		c.fleet(ctx, func(fc masterv1connect.MasterFleetServiceClient) error {
			_, err := fc.AssignShard(ctx, connect.NewRequest(&masterv1.AssignShardRequest{Shard: shard, Node: c.nodes[i%len(c.nodes)].name, AutoRestore: true, Warm: true}))
			return err
		})
	}
	return c
}

func (c *cluster) masterURLs() []string {
	var out []string
	for _, m := range []string{"m1", "m2"} {
		out = append(out, "http://127.0.0.1:"+strconv.Itoa(c.mports[m]))
	}
	return out
}

func (c *cluster) startMaster(name string, standby bool) {
	c.t.Helper()
	args := []string{"--election-timeout", electionTimeout, "--client-active-ttl", clientTTL, "--client-suspicion-ttl", clientTTL,
		"--liveness-interval", "50ms", "--snapshot-interval", "0", "--shards", "16", "--log-level", "warn"}
	if standby {
		args = append(args, "--standby")
	}
	p := sidecarproc.StartMaster(c.t, shardfenceCmd, name, "kv", "127.0.0.1:"+strconv.Itoa(c.mports[name]), c.mstore, args...)
	c.mu.Lock()
	c.masters[name] = p
	c.mu.Unlock()
}

func (c *cluster) startSidecar(n *node) {
	c.t.Helper()
	p := sidecarproc.Start(c.t, shardfenceCmd, n.name, c.store, "--listen", "127.0.0.1:"+strconv.Itoa(n.sidecarPort),
		"--master", strings.Join(c.masterURLs(), ","), "--app-advertise", "http://127.0.0.1:"+strconv.Itoa(n.kvPort),
		"--checkpoint-every-bytes", "16384", "--log-level", "warn")
	c.mu.Lock()
	n.sidecar = p
	c.mu.Unlock()
}

func (c *cluster) startKV(n *node) {
	c.t.Helper()
	args := []string{"--listen", "127.0.0.1:" + strconv.Itoa(n.kvPort), "--sidecar", "127.0.0.1:" + strconv.Itoa(n.sidecarPort),
		"--shards", strconv.Itoa(numShards), "--data-dir", n.dataDir}
	if c.broken != "" {
		args = append(args, "--broken", c.broken)
	}
	p := sidecarproc.StartProgram(c.t, kvCmd, "kv "+n.name, "kv listening on ", "", args...)
	c.mu.Lock()
	n.kvproc = p
	c.mu.Unlock()
}

// primaryMaster returns the name of the master that is primary now.
func (c *cluster) primaryMaster(ctx context.Context) (string, error) {
	p, _, ok := client.NewMasters(http.DefaultClient, c.masterURLs()).Find(ctx, time.Second)
	if !ok || !p.Confirmed {
		return "", fmt.Errorf("no primary master")
	}
	return p.Leader.Node, nil
}

// fleet runs f against the primary master, retrying until it succeeds.
func (c *cluster) fleet(ctx context.Context, f func(masterv1connect.MasterFleetServiceClient) error) {
	c.t.Helper()
	for {
		p, _, ok := client.NewMasters(http.DefaultClient, c.masterURLs()).Find(ctx, time.Second)
		var err error
		if ok {
			err = f(masterv1connect.NewMasterFleetServiceClient(http.DefaultClient, p.Addr))
		} else {
			err = fmt.Errorf("no primary master")
		}
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			c.t.Fatalf("master call: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pause freezes a process (SIGSTOP) for d, then resumes it.
func pause(p interface{ Signal(os.Signal) error }, d time.Duration) {
	_ = p.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	_ = p.Signal(syscall.SIGCONT)
}

type signaler struct{ cmd *exec.Cmd }

func (s signaler) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }
