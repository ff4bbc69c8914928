// Command kv is an example shard primary on shardfence: a key-value
// service whose every shard is a fenced log in the object store. It is the
// template to copy: writes go through the local sidecar and are answered
// once the log acknowledged them (and they were applied); reads are served
// from memory after a read barrier, so a deposed process never answers
// with stale data; shards come and go as the sidecar's Watch says.
//
// HTTP API (JSON), keys spread over shards kv-0..kv-N-1 by kvclient.ShardOf:
//
//	GET    /v1/kv/KEY                                   {"value": "...", "found": true}
//	PUT    /v1/kv/KEY      {"value": "..."}             {}
//	POST   /v1/kv/KEY/cas  {"expect": "...", "absent": false, "value": "..."}  {"swapped": true}
//	DELETE /v1/kv/KEY                                   {"deleted": true}
//
// 421: this process does not serve the key's shard (nothing was written);
// 503: it is loading the shard or lost it (nothing written); 504: the
// write's outcome is unknown (it may be in the log). See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/client"
	"github.com/shardfence/shardfence/examples/kv/kvclient"
)

type server struct {
	sc     *client.Client
	shards int
	dir    string
	log    *slog.Logger
	// broken makes this process wrong on purpose, for the nemesis test's
	// teeth: "early-ack" answers a write before the log acknowledged it.
	broken string

	mu    sync.Mutex
	owned map[string]*shard // shards served here, by name
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address of the key-value API")
	sidecarAddr := flag.String("sidecar", "127.0.0.1:7400", "the local sidecar: HOST:PORT or unix:///path")
	shards := flag.Int("shards", 3, "number of shards the keys spread over (the same for every process and client)")
	dir := flag.String("data-dir", "", "where each shard's last checkpoint is kept locally (default: none)")
	broken := flag.String("broken", "", "for tests only: early-ack answers writes before the log acknowledged them")
	tokenFile := flag.String("sidecar-token-file", "", "file holding the sidecar's bearer token (its --auth-token-file), for a sidecar that wants one (one listening off loopback, as in a Kubernetes pod)")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var opts []client.Option
	if *tokenFile != "" {
		tok, err := os.ReadFile(*tokenFile)
		if err != nil {
			log.Error("kv stopped", "err", err)
			os.Exit(1)
		}
		opts = append(opts, client.WithToken(strings.TrimSpace(string(tok))))
	}
	if err := run(*listen, *sidecarAddr, *shards, *dir, *broken, log, opts...); err != nil {
		log.Error("kv stopped", "err", err)
		os.Exit(1)
	}
}

func run(listen, sidecarAddr string, shards int, dir, broken string, log *slog.Logger, opts ...client.Option) error {
	if shards < 1 || (broken != "" && broken != "early-ack") {
		return errors.New("--shards must be positive and --broken empty or early-ack")
	}
	sc, err := client.New(sidecarAddr, opts...)
	if err != nil {
		return err
	}
	defer sc.Close()
	s := &server{sc: sc, shards: shards, dir: dir, log: log, broken: broken, owned: map[string]*shard{}}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go s.follow(ctx)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Printf("kv listening on %s\n", ln.Addr())
	srv := &http.Server{Handler: http.HandlerFunc(s.serveHTTP), ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Shutdown(context.Background()) }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// follow keeps the set of owned shards as the sidecar's Watch says: a
// shard gained is rebuilt (checkpoint + log) and served; one lost or
// fenced is dropped at once. A request for the sidecar's checkpoint is
// answered. The watch is started again if it ends.
func (s *server) follow(ctx context.Context) {
	for ctx.Err() == nil {
		files := map[string][]byte{} // restore streams, by shard
		err := s.sc.Watch(ctx, nil, func(ev *sidecarv1.WatchResponse) error {
			name := ev.GetShard()
			switch ev.GetKind() {
			case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_OPENING:
				s.drop(name, "opening again")
				delete(files, name)
			case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_CHECKPOINT_FILE:
				if f := ev.GetCheckpointFile(); f.GetName() == checkpointFile {
					files[name] = append(files[name], f.GetData()...)
				}
			case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_GAINED:
				sh := &shard{name: name, term: ev.GetTerm(), sc: s.sc, dir: s.dir}
				streamed, hasCkpt := files[name], ev.GetRestorePoint().GetCheckpointGen() > 0 || ev.GetStatus().GetCheckpointGen() > 0
				delete(files, name)
				go s.serveShard(ctx, sh, streamed, hasCkpt)
			case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_LOST, sidecarv1.WatchEventKind_WATCH_EVENT_KIND_FENCED:
				s.drop(name, ev.GetKind().String())
			case sidecarv1.WatchEventKind_WATCH_EVENT_KIND_CHECKPOINT_REQUESTED:
				if sh := s.shard(name); sh != nil {
					go func() {
						if err := sh.checkpoint(ctx); err != nil {
							s.log.Warn("checkpoint not published", "shard", name, "err", err)
						}
					}()
				}
			}
			return nil
		})
		// Without the watch this process cannot know what it owns: it
		// serves nothing until the watch is back.
		s.mu.Lock()
		s.owned = map[string]*shard{}
		s.mu.Unlock()
		if ctx.Err() == nil {
			s.log.Warn("watch of the sidecar ended; watching again", "err", err)
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// serveShard rebuilds a gained shard and starts serving it.
func (s *server) serveShard(ctx context.Context, sh *shard, streamed []byte, hasCkpt bool) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := sh.rebuild(ctx, streamed, hasCkpt)
		if err == nil {
			s.mu.Lock()
			s.owned[sh.name] = sh
			s.mu.Unlock()
			s.log.Info("serving shard", "shard", sh.name, "term", sh.term, "next_seq", sh.next)
			return
		}
		if client.IsFenced(err) || client.Reason(err) == client.ReasonNotOpen || client.Reason(err) == client.ReasonWrongTerm || attempt > 50 {
			s.log.Warn("shard not served", "shard", sh.name, "term", sh.term, "err", err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *server) shard(name string) *shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owned[name]
}

func (s *server) drop(name, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owned[name] != nil {
		delete(s.owned, name)
		s.log.Info("stopped serving shard", "shard", name, "why", why)
	}
}

func (s *server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	key, cas := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/v1/kv/"), "/cas")
	if !strings.HasPrefix(r.URL.Path, "/v1/kv/") || key == "" {
		reply(w, http.StatusNotFound, map[string]string{"error": "not found: use /v1/kv/KEY"})
		return
	}
	name := kvclient.ShardOf(key, s.shards)
	sh := s.shard(name)
	if sh == nil {
		reply(w, http.StatusMisdirectedRequest, map[string]string{"error": "this process does not serve shard " + name + ": ask the routing feed for its owner"})
		return
	}
	var body struct {
		Value  string `json:"value"`
		Expect string `json:"expect"`
		Absent bool   `json:"absent"`
	}
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil {
			reply(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
			return
		}
	}
	ctx := r.Context()
	switch {
	case r.Method == http.MethodGet && !cas:
		s.get(ctx, w, sh, key)
	case r.Method == http.MethodPut && !cas:
		s.write(ctx, w, sh, op{Kind: "put", Key: key, Value: body.Value})
	case r.Method == http.MethodPost && cas:
		s.write(ctx, w, sh, op{Kind: "cas", Key: key, Value: body.Value, Expect: body.Expect, Absent: body.Absent})
	case r.Method == http.MethodDelete && !cas:
		s.write(ctx, w, sh, op{Kind: "del", Key: key})
	default:
		reply(w, http.StatusMethodNotAllowed, map[string]string{"error": "GET, PUT or DELETE /v1/kv/KEY, POST /v1/kv/KEY/cas"})
	}
}

// get answers from memory after a read barrier: the sidecar proved it
// still holds the shard after the request arrived, and every op
// acknowledged before is applied.
func (s *server) get(ctx context.Context, w http.ResponseWriter, sh *shard, key string) {
	b, err := sh.sc.Barrier(ctx, sh.name, sh.term)
	if err == nil {
		err = sh.catchUp(ctx, b.NextSeqNo)
	}
	if err != nil {
		s.failed(w, sh, err, false)
		return
	}
	v, found := sh.get(key)
	reply(w, http.StatusOK, map[string]any{"value": v, "found": found})
}

// write appends the op, waits until it is applied, and answers with its
// outcome.
func (s *server) write(ctx context.Context, w http.ResponseWriter, sh *shard, o op) {
	o.ID = fmt.Sprintf("%d-%d", time.Now().UnixNano(), nextID())
	raw, _ := json.Marshal(o)
	if s.broken == "early-ack" {
		// Wrong on purpose: answered before the log has it.
		go func() { _, _ = sh.sc.ShardAt(sh.name, sh.term).Append(context.Background(), raw) }()
		reply(w, http.StatusOK, map[string]any{"swapped": true, "deleted": true})
		return
	}
	ack, err := sh.sc.ShardAt(sh.name, sh.term).Append(ctx, raw)
	if err != nil {
		s.failed(w, sh, err, true)
		return
	}
	if err := sh.catchUp(ctx, ack.FirstSeqNo+1); err != nil {
		// In the log, but its result was not read back.
		reply(w, http.StatusGatewayTimeout, map[string]string{"error": "outcome unknown: acknowledged by the log, not applied here: " + err.Error()})
		return
	}
	outcome, _ := sh.result(o.ID)
	reply(w, http.StatusOK, map[string]any{"swapped": outcome, "deleted": outcome})
}

// failed answers a failed call: 504 when a write's outcome is unknown,
// 503 otherwise (nothing written); a shard lost here is dropped.
func (s *server) failed(w http.ResponseWriter, sh *shard, err error, write bool) {
	if client.IsFenced(err) || client.Reason(err) == client.ReasonNotOpen || client.Reason(err) == client.ReasonWrongTerm || client.Reason(err) == client.ReasonHandedOff {
		s.drop(sh.name, err.Error())
	}
	if write && (client.IsOutcomeUnknown(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		reply(w, http.StatusGatewayTimeout, map[string]string{"error": "outcome unknown: " + err.Error()})
		return
	}
	reply(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
}

var (
	idMu sync.Mutex
	ids  int64
)

func nextID() int64 {
	idMu.Lock()
	defer idMu.Unlock()
	ids++
	return ids
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
