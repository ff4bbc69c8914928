package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/shardfence/shardfence/client"
)

// op is one write as the shard's log records it. The log is the state: a
// replica of the shard is the map its ops build, applied in log order.
type op struct {
	ID     string `json:"id"` // the request's, to find its result
	Kind   string `json:"op"` // put, cas, del
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Expect string `json:"expect,omitempty"`
	Absent bool   `json:"absent,omitempty"` // cas: expect no value
}

// snapshot is a shard's checkpoint file (and its local copy): the map as
// of the end of generation Gen, and the sequence number after it.
type snapshot struct {
	Gen     int64             `json:"gen"`
	NextSeq int64             `json:"next_seq"`
	Data    map[string]string `json:"data"`
}

const checkpointFile = "state.json"

// shard is the state of one shard this process serves: built from a
// checkpoint and the ops after it, then kept up to date by reading the log
// after each acknowledged write.
type shard struct {
	name string
	term int64
	sc   *client.Client
	dir  string // where its local snapshot lives ("" for none)

	mu      sync.Mutex
	data    map[string]string
	next    int64           // sequence number of the next op to apply
	gen     int64           // generation of the last op applied
	results map[string]bool // op id -> outcome (cas swapped, del found)

	readMu sync.Mutex // one catch-up read at a time
}

// applyBatch applies one generation's ops (Read delivers whole
// generations, so the state is always at a generation's end).
func (s *shard) applyBatch(b client.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, raw := range b.Ops {
		seq := b.FirstSeqNo + int64(i)
		if seq < s.next {
			continue // applied already
		}
		if seq > s.next {
			return fmt.Errorf("shard %s: op %d arrived before op %d", s.name, seq, s.next)
		}
		var o op
		if err := json.Unmarshal(raw, &o); err != nil {
			return fmt.Errorf("shard %s: op %d is not a kv op: %w", s.name, seq, err)
		}
		cur, found := s.data[o.Key]
		outcome := true
		switch o.Kind {
		case "put":
			s.data[o.Key] = o.Value
		case "cas":
			outcome = (o.Absent && !found) || (!o.Absent && found && cur == o.Expect)
			if outcome {
				s.data[o.Key] = o.Value
			}
		case "del":
			outcome = found
			delete(s.data, o.Key)
		}
		if o.ID != "" {
			s.results[o.ID] = outcome
		}
		s.next = seq + 1
	}
	s.gen = max(s.gen, b.Gen)
	return nil
}

// catchUp reads the log from the next op to apply until every op below
// upTo is applied.
func (s *shard) catchUp(ctx context.Context, upTo int64) error {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	for {
		s.mu.Lock()
		next := s.next
		s.mu.Unlock()
		if next >= upTo {
			return nil
		}
		before := next
		if err := s.sc.Read(ctx, s.name, next, 0, s.applyBatch); err != nil {
			return err
		}
		s.mu.Lock()
		next = s.next
		s.mu.Unlock()
		if next == before {
			return fmt.Errorf("shard %s: the log holds no op %d yet", s.name, next)
		}
	}
}

// result takes the outcome of the op with id, once it was applied.
func (s *shard) result(id string) (bool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.results[id]
	delete(s.results, id)
	return r, ok
}

// get reads a key from the state.
func (s *shard) get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[key]
	return v, ok
}

// rebuild loads the shard's state: the newest of the checkpoint the
// sidecar restored (streamed, or served on demand after a warm open) and
// this process's local snapshot, then the log after it.
func (s *shard) rebuild(ctx context.Context, streamed []byte, hasCheckpoint bool) error {
	base, baseErr := s.restored(ctx, streamed, hasCheckpoint)
	// A local snapshot newer than the restored checkpoint is a prefix of
	// the lineage too (it was published at an acknowledged generation),
	// and the log after it may be all that is left after a GC.
	if local, err := s.loadLocal(); err == nil && (baseErr != nil || local.NextSeq > base.NextSeq) {
		err := s.load(ctx, local)
		if err == nil || baseErr != nil {
			return err
		}
	}
	if baseErr != nil {
		return baseErr
	}
	return s.load(ctx, base)
}

// restored is the checkpoint the sidecar restored: streamed by the open,
// or read on demand after a warm open; empty when there is none.
func (s *shard) restored(ctx context.Context, streamed []byte, hasCheckpoint bool) (snapshot, error) {
	base := snapshot{Data: map[string]string{}}
	switch {
	case streamed != nil:
		if err := json.Unmarshal(streamed, &base); err != nil {
			return base, fmt.Errorf("shard %s: restored checkpoint: %w", s.name, err)
		}
	case hasCheckpoint:
		var buf []byte
		err := s.sc.ReadCheckpointFile(ctx, s.name, checkpointFile, 0, 0, func(_ int64, b []byte) error {
			buf = append(buf, b...)
			return nil
		})
		if err != nil {
			return base, fmt.Errorf("shard %s: the restored checkpoint is not readable (assign the shard --warm): %w", s.name, err)
		}
		if err := json.Unmarshal(buf, &base); err != nil {
			return base, fmt.Errorf("shard %s: restored checkpoint: %w", s.name, err)
		}
	}
	return base, nil
}

func (s *shard) load(ctx context.Context, snap snapshot) error {
	s.mu.Lock()
	s.data, s.next, s.gen, s.results = snap.Data, snap.NextSeq, snap.Gen, map[string]bool{}
	if s.data == nil {
		s.data = map[string]string{}
	}
	s.mu.Unlock()
	b, err := s.sc.Barrier(ctx, s.name, s.term)
	if err != nil {
		return err
	}
	return s.catchUp(ctx, b.NextSeqNo)
}

// checkpoint publishes the state as the shard's checkpoint, after writing
// it locally: the sidecar asked (its replay backlog grew).
func (s *shard) checkpoint(ctx context.Context) error {
	s.mu.Lock()
	snap := snapshot{Gen: s.gen, NextSeq: s.next, Data: make(map[string]string, len(s.data))}
	for k, v := range s.data {
		snap.Data[k] = v
	}
	s.mu.Unlock()
	if snap.Gen == 0 {
		return nil
	}
	body, err := json.Marshal(snap)
	if err != nil {
		return err
	}
	if err := s.saveLocal(body); err != nil {
		return err
	}
	_, err = s.sc.PublishCheckpoint(ctx, s.name, snap.Gen, map[string][]byte{checkpointFile: body})
	return err
}

func (s *shard) localPath() string { return filepath.Join(s.dir, s.name+".json") }

func (s *shard) saveLocal(body []byte) error {
	if s.dir == "" {
		return nil
	}
	tmp := s.localPath() + ".tmp"
	if err := os.WriteFile(tmp, body, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.localPath())
}

func (s *shard) loadLocal() (snapshot, error) {
	var snap snapshot
	if s.dir == "" {
		return snap, errors.New("no data dir")
	}
	body, err := os.ReadFile(s.localPath())
	if err != nil {
		return snap, err
	}
	return snap, json.Unmarshal(body, &snap)
}
