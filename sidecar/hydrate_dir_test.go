package sidecar

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/blobstore/mem"
)

// An open streams the checkpoint through a folder under HydrateDir: the
// files reach the primary in name order, nested names included, and the
// folder is gone once the open ended.
func TestOpenHydratesThroughAFolderItRemoves(t *testing.T) {
	store := mem.New()
	c := sidecarOn(t, store)
	openShard(t, c, "s", 1, "a")
	ack, err := appendOps(t.Context(), c, "s", "op0")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("b", 3<<20+17) // more than one chunk
	if _, err := c.PublishCheckpoint(t.Context(), connect.NewRequest(&sidecarv1.PublishCheckpointRequest{Shard: "s", Gen: ack.GetGen(), Files: []*sidecarv1.CheckpointFile{
		{Name: "z", Data: []byte("last"), Last: true},
		{Name: "a/b/big", Data: []byte(big), Last: true},
		{Name: "a/c", Data: []byte("c"), Last: true},
	}})); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, d := serveOn(t, store, Options{HydrateDir: dir})
	st, err := d.Open(t.Context(), connect.NewRequest(&sidecarv1.OpenRequest{Shard: "s", Term: 2, AllocationId: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	var order []string
	for st.Receive() {
		if f, ok := st.Msg().GetEvent().(*sidecarv1.OpenResponse_CheckpointFile); ok {
			name := f.CheckpointFile.GetName()
			if _, seen := files[name]; !seen {
				order = append(order, name)
			}
			files[name] += string(f.CheckpointFile.GetData())
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[a/b/big a/c z]" || files["a/b/big"] != big || files["a/c"] != "c" || files["z"] != "last" {
		t.Fatalf("streamed %v (big file %d bytes)", order, len(files["a/b/big"]))
	}
	left, err := os.ReadDir(dir)
	if err != nil || len(left) != 0 {
		t.Fatalf("the hydrate folder still holds %v (%v) after the open", left, err)
	}
}

func TestHydrateDirMustExist(t *testing.T) {
	err := Options{HydrateDir: filepath.Join(t.TempDir(), "missing")}.Validate()
	if err == nil || !strings.Contains(err.Error(), "hydrate-dir") {
		t.Fatalf("a missing hydrate dir: %v", err)
	}
}
