package main

import (
	"path/filepath"
	"strings"
	"testing"
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
