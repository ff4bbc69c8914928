package sidecar

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore/mem"
)

func TestCheckpointGCAndInspect(t *testing.T) {
	store := mem.New()
	// No GC after the checkpoint: the test runs GC itself.
	_, c := serveOn(t, store, Options{Checkpoint: CheckpointPolicy{NoGC: true}})
	openShard(t, c, "s", 1, "a")
	var ckptGen int64
	for i := range 10 {
		ack, err := appendOps(t.Context(), c, "s", fmt.Sprint("op", i))
		if err != nil {
			t.Fatal(err)
		}
		ckptGen = ack.GetGen()
	}
	// A checkpoint of an unacknowledged generation is refused.
	_, err := c.PublishCheckpoint(t.Context(), connect.NewRequest(&sidecarv1.PublishCheckpointRequest{Shard: "s", Gen: ckptGen + 5}))
	if code, d := detailOf(t, err); code != connect.CodeInvalidArgument || d.GetReason() != "invalid_argument" {
		t.Fatalf("checkpoint past the acks: %v", err)
	}
	for _, bad := range []*sidecarv1.CheckpointFile{{Name: "../x", Data: []byte("x")}, {Name: "f", Offset: 7, Data: []byte("x")}} {
		_, err := c.PublishCheckpoint(t.Context(), connect.NewRequest(&sidecarv1.PublishCheckpointRequest{Shard: "s", Gen: ckptGen, Files: []*sidecarv1.CheckpointFile{bad}}))
		if code, _ := detailOf(t, err); code != connect.CodeInvalidArgument {
			t.Errorf("checkpoint file %q at %d: %v", bad.GetName(), bad.GetOffset(), err)
		}
	}
	res, err := c.PublishCheckpoint(t.Context(), connect.NewRequest(&sidecarv1.PublishCheckpointRequest{Shard: "s", Gen: ckptGen, Files: []*sidecarv1.CheckpointFile{
		{Name: "state", Data: []byte("ops 0..9 ")}, {Name: "state", Offset: 9, Data: []byte("applied"), Last: true},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetKey() == "" {
		t.Fatal("no checkpoint key")
	}
	for i := 10; i < 13; i++ {
		if _, err := appendOps(t.Context(), c, "s", fmt.Sprint("op", i)); err != nil {
			t.Fatal(err)
		}
	}
	dry, err := c.GC(t.Context(), connect.NewRequest(&sidecarv1.GCRequest{Shard: "s", DryRun: true}))
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Msg.GetDeleted()) == 0 {
		t.Fatal("GC dry run planned nothing below a checkpoint")
	}
	gc, err := c.GC(t.Context(), connect.NewRequest(&sidecarv1.GCRequest{Shard: "s"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(gc.Msg.GetDeleted()) != len(dry.Msg.GetDeleted()) {
		t.Errorf("GC deleted %d objects, the dry run planned %d", len(gc.Msg.GetDeleted()), len(dry.Msg.GetDeleted()))
	}
	// The ops after the checkpoint are still readable.
	got, err := readAll(t, c, "s", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "op10,op11,op12" {
		t.Errorf("read after GC from 10: %v", got)
	}

	// A successor restores from the checkpoint: its Open streams the file
	// before the ops after it.
	d := sidecarOn(t, store)
	st, err := d.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "s", Term: 2, AllocationId: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	var file []byte
	var ops []string
	var opened *sidecarv1.Opened
	for st.Receive() {
		switch ev := st.Msg().GetEvent().(type) {
		case *sidecarv1.OpenResponse_CheckpointFile:
			if len(ops) > 0 {
				t.Error("checkpoint file streamed after replayed ops")
			}
			file = append(file, ev.CheckpointFile.GetData()...)
		case *sidecarv1.OpenResponse_Ops:
			for _, op := range ev.Ops.GetOps() {
				ops = append(ops, string(op))
			}
		case *sidecarv1.OpenResponse_Opened:
			opened = ev.Opened
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if string(file) != "ops 0..9 applied" || strings.Join(ops, ",") != "op10,op11,op12" {
		t.Errorf("restore streamed file %q and ops %v", file, ops)
	}
	if rp := opened.GetRestorePoint(); rp.GetCheckpointGen() != ckptGen || rp.GetNextSeqNo() != 13 {
		t.Errorf("restore point %v, want checkpoint gen %d and next seq 13", rp, ckptGen)
	}

	ins, err := d.Inspect(t.Context(), connect.NewRequest(&sidecarv1.InspectRequest{Shard: "s"}))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Join(ins.Msg.GetLines(), "\n")
	for _, want := range []string{"seal marker of term 2", "seal marker of term 1", fmt.Sprintf("checkpoint term 1 gen %d", ckptGen), "lineage: term 2"} {
		if !strings.Contains(lines, want) {
			t.Errorf("inspect lacks %q:\n%s", want, lines)
		}
	}
	if len(ins.Msg.GetFenceKeys()) != 1 || ins.Msg.GetFenceKeys()[0].GetTerm() != 2 {
		t.Errorf("fence keys after term 2's claim: %v", ins.Msg.GetFenceKeys())
	}
}

// A checkpoint's chunks are put together in memory: in order per file,
// interleaved files allowed, plain names only, no name both a file and a
// folder.
func TestAssembleChunks(t *testing.T) {
	files, err := assembleChunks([]FileChunk{
		{Name: "a", Data: []byte("12")}, {Name: "d/b", Data: []byte("x")}, {Name: "a", Offset: 2, Data: []byte("3"), Last: true}, {Name: "e", Last: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(files.Names()); got != "[a d/b e]" {
		t.Fatalf("names %s", got)
	}
	if b, _ := files.ReadFile("a"); string(b) != "123" {
		t.Errorf("a = %q", b)
	}
	for _, bad := range [][]FileChunk{
		{{Name: "../x"}},
		{{Name: "a//b"}},
		{{Name: "a", Data: []byte("1")}, {Name: "a", Offset: 2}},
		{{Name: "a"}, {Name: "a/b"}},
		{{Name: "a/b/c"}, {Name: "a/b"}},
	} {
		if _, err := assembleChunks(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("chunks %+v: %v, want invalid argument", bad, err)
		}
	}
}

// A checkpoint published again at the same generation: the same one is
// answered as published (a retry); a different one is refused with
// already_exists (checkpoint_exists) and changes nothing: its files used
// to overwrite the published checkpoint's before its manifest was
// refused, with internal, leaving a checkpoint whose files no longer
// matched their checksums.
func TestADifferentCheckpointAtTheSameGenerationIsRefused(t *testing.T) {
	store := mem.New()
	_, c := serveOn(t, store, Options{Checkpoint: CheckpointPolicy{NoGC: true}})
	openShard(t, c, "s", 1, "a")
	ack, err := appendOps(t.Context(), c, "s", "op0")
	if err != nil {
		t.Fatal(err)
	}
	publish := func(data string) error {
		_, err := c.PublishCheckpoint(t.Context(), connect.NewRequest(&sidecarv1.PublishCheckpointRequest{Shard: "s", Gen: ack.GetGen(),
			Files: []*sidecarv1.CheckpointFile{{Name: "state", Data: []byte(data), Last: true}}}))
		return err
	}
	if err := publish("first"); err != nil {
		t.Fatal(err)
	}
	if err := publish("first"); err != nil {
		t.Fatalf("the same checkpoint again: %v", err)
	}
	err = publish("second")
	if code, d := detailOf(t, err); code != connect.CodeAlreadyExists || d.GetReason() != "checkpoint_exists" || !strings.Contains(err.Error(), "later generation") {
		t.Fatalf("a different checkpoint at the same generation: %v", err)
	}
	// A successor restores the first checkpoint, intact.
	d := sidecarOn(t, store)
	st, err := d.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "s", Term: 2, AllocationId: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	var file []byte
	for st.Receive() {
		file = append(file, st.Msg().GetCheckpointFile().GetData()...)
	}
	if err := st.Err(); err != nil || string(file) != "first" {
		t.Fatalf("the successor restored %q: %v", file, err)
	}
}
