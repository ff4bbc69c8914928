package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/ha"
	"github.com/shardfence/shardfence/sidecar"
)

// logSink is a log the test reads while the agent writes it.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// haMaster is one master of an HA cluster (a real ha.Node over the
// shared store) served over HTTP on a loopback port.
type haMaster struct {
	url  string
	node *ha.Node
	srv  *http.Server
}

func startHAMaster(t *testing.T, store *blobstore.Container, name string, standby bool) *haMaster {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	cfg := master.Config{Shards: 16, Liveness: master.LivenessConfig{ActiveTTL: 500 * time.Millisecond, SuspicionTTL: 500 * time.Millisecond, MonitorInterval: 20 * time.Millisecond}}
	n, err := ha.New(ha.Options{Store: store, Cluster: "c", Standby: standby, Node: name, Advertise: url, Config: cfg, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	n.Mount(mux)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(ctx) }()
	t.Cleanup(func() { _ = srv.Close(); cancel(); <-done })
	return &haMaster{url: url, node: n, srv: srv}
}

// A sidecar whose --master list names a standby first (or only) finds the
// primary through it and registers there: that is no lost master, and
// its log does not say so. A real loss of the master it registered with
// still warns.
func TestFirstRegistrationThroughAStandbyIsNoLostMaster(t *testing.T) {
	for _, tc := range []struct {
		name    string
		masters func(primary, standby string) []string
	}{
		{"standby first", func(p, s string) []string { return []string{s, p} }},
		{"standby only", func(_, s string) []string { return []string{s} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := mem.New()
			p := startHAMaster(t, store, "m1", false)
			waitFor(t, "m1 primary", func() bool { return p.node.Status().Role == ha.RolePrimary })
			s := startHAMaster(t, store, "m2", true)
			waitFor(t, "m2 a standby that knows the primary", func() bool {
				st := s.node.Status()
				return st.Role == ha.RoleStandby && st.Leader.Addr == p.url
			})

			srv, err := sidecar.New(context.Background(), mem.New(), sidecar.Options{Node: "a"})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Shutdown(context.Background())
			var log logSink
			ag, err := New(Options{Server: srv, Node: "a", Addr: "http://a", Masters: tc.masters(p.url, s.url),
				RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = ag.Run(ctx) }()
			defer func() { cancel(); <-done }()

			waitFor(t, "registration with the primary and a ping", func() bool {
				st := ag.Status()
				return st.Registered && st.Master == p.url && !st.LastPing.IsZero()
			})
			out := log.String()
			if !strings.Contains(out, `msg="registered with the master"`) {
				t.Fatalf("no registration line:\n%s", out)
			}
			if strings.Contains(out, "lost the master") || strings.Contains(out, "level=WARN") || strings.Contains(out, "level=ERROR") {
				t.Fatalf("the first registration, through a standby, logged a warning:\n%s", out)
			}

			// The primary goes away: that is a lost master.
			_ = p.srv.Close()
			waitFor(t, "the lost master warned", func() bool {
				return strings.Contains(log.String(), `level=WARN msg="lost the master; looking for the primary"`)
			})
		})
	}
}

// A master that forgot the node (it restarted without state, or the node
// went offline while cut off) answers its ping NEED_REMOUNT: the node
// registers again and says so at info level, not as a lost master.
func TestReregisterIsNoLostMaster(t *testing.T) {
	newMaster := func() *master.Master {
		m, err := master.New(master.Config{Shards: 16}, master.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	var cur atomic.Pointer[master.Master]
	cur.Store(newMaster())
	serving := func() (*master.Master, error) { return cur.Load(), nil }
	mux := http.NewServeMux()
	mux.Handle(master.NewHandlerFunc(serving))
	mux.Handle(master.NewFleetHandlerFunc(serving))
	hs := httptest.NewServer(mux)
	defer hs.Close()

	srv, err := sidecar.New(context.Background(), mem.New(), sidecar.Options{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	var log logSink
	ag, err := New(Options{Server: srv, Node: "a", Addr: "http://a", Masters: []string{hs.URL},
		RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ag.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "registration", func() bool { return ag.Status().Registered })
	first := ag.Status().Incarnation

	cur.Store(newMaster())
	waitFor(t, "registration with the new master", func() bool {
		st := ag.Status()
		return st.Registered && len(cur.Load().Nodes()) == 1 && strings.Contains(log.String(), "register again")
	})
	out := log.String()
	if !strings.Contains(out, `level=INFO msg="the master asks this node to register again"`) {
		t.Fatalf("no info line for the re-registration (incarnation %d before):\n%s", first, out)
	}
	if strings.Contains(out, "lost the master") || strings.Contains(out, "level=WARN") {
		t.Fatalf("a re-registration logged as a lost master:\n%s", out)
	}
}
