package client_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/client"
)

// A primary opens its engine over a warm open's checkpoint files through
// io.ReaderAt: the bytes are the published ones, read at any offset while
// the shard is partial, with io.ReaderAt's end-of-file rules, and the
// errors are typed.
func TestCheckpointFileReaderAt(t *testing.T) {
	store := mem.New()
	lnA, lnB := listenTCP(t), listenTCP(t)
	serve(t, store, lnA, "a", "")
	serve(t, store, lnB, "b", "")
	a := newClient(t, lnA.Addr().String())
	open(t, a, "s", 1, "a1")
	ack, err := a.Shard("s").Append(t.Context(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20+17)
	_, _ = rand.NewChaCha8([32]byte{3}).Read(data)
	if _, err := a.API().PublishCheckpoint(t.Context(), connect.NewRequest(&sidecarv1.PublishCheckpointRequest{Shard: "s", Gen: ack.Gen,
		Files: []*sidecarv1.CheckpointFile{{Name: "seg", Data: data, Last: true}}})); err != nil {
		t.Fatal(err)
	}

	b := newClient(t, lnB.Addr().String())
	o, err := b.Open(t.Context(), &sidecarv1.OpenRequest{Shard: "s", Term: 2, AllocationId: "a2", Warm: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := b.CheckpointFiles(t.Context(), "s", o.GetCheckpoint())
	f := files["seg"]
	if f == nil || f.Size() != int64(len(data)) {
		t.Fatalf("checkpoint %v", o.GetCheckpoint())
	}
	readAll(t, f, data)
	p := make([]byte, 100)
	if n, err := f.ReadAt(p, f.Size()-40); n != 40 || err != io.EOF || !bytes.Equal(p[:40], data[len(data)-40:]) {
		t.Fatalf("ReadAt across the end: %d, %v", n, err)
	}
	if n, err := f.ReadAt(p, f.Size()); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt at the end: %d, %v", n, err)
	}
	missing := b.CheckpointFile(t.Context(), "s", &sidecarv1.CheckpointFileInfo{Name: "nope", Size: 10})
	if _, err := missing.ReadAt(p[:5], 0); client.Reason(err) != client.ReasonNoSuchFile {
		t.Fatalf("a file not in the manifest: %v", err)
	}
	longer := b.CheckpointFile(t.Context(), "s", &sidecarv1.CheckpointFileInfo{Name: "seg", Size: f.Size() + 10})
	if _, err := longer.ReadAt(p[:20], f.Size()-5); client.Reason(err) != client.ReasonOutOfRange {
		t.Fatalf("a range past the file: %v", err)
	}
	var ce *client.Error
	if _, err := b.Shard("s").Append(t.Context(), []byte("y")); err != nil && !(errors.As(err, &ce) && ce.Reason == client.ReasonReplaying) {
		t.Fatalf("append right after a warm open: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := b.Status(t.Context(), "s")
		if err != nil {
			t.Fatal(err)
		}
		if !st.GetReplaying() && st.GetLocality() == "full" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	readAll(t, f, data)
}

// readAll reads f whole through a SectionReader, and at random offsets,
// and compares with data.
func readAll(t *testing.T, f *client.CheckpointFile, data []byte) {
	t.Helper()
	got, err := io.ReadAll(bufio.NewReaderSize(io.NewSectionReader(f, 0, f.Size()), 256<<10))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("whole file: %d bytes, %v", len(got), err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		off, n := rng.Int64N(f.Size()), rng.IntN(300<<10)
		p := make([]byte, n)
		m, err := f.ReadAt(p, off)
		want := data[off:min(off+int64(n), int64(len(data)))]
		if m != len(want) || !bytes.Equal(p[:m], want) || (m < n && err != io.EOF) || (m == n && err != nil) {
			t.Fatalf("ReadAt(%d bytes at %d): %d, %v", n, off, m, err)
		}
	}
}
