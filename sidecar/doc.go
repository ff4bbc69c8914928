// Package sidecar is the shard-writer service that runs next to each shard
// primary: it opens shards at a term (claim, seal, restore), turns appends
// into fenced, group-committed translog syncs, streams the lineage back,
// and reports status and metrics. The API is the ConnectRPC service of
// api/sidecar/v1, so gRPC, gRPC-Web and JSON clients all reach the same
// handlers.
//
// Three parts, and the service holds no protocol decision of its own:
//
//   - The registry (registry.go) holds the shards of this sidecar by name.
//     Open and AdoptHandoff take a shard's slot with reserve (admission
//     under the registry's lock: busy, same term again, lower term), then
//     commit or rollback; a commit closes the writer it replaced in a
//     goroutine Shutdown waits for. Every shard this sidecar gains or
//     loses goes through it.
//   - Shard states (state.go): ShardState is a shard's lifecycle here
//     (opening, open, handing_off, handed_off, closing) and what Status
//     derives from its writer (fenced, failed) or Close reports (closed);
//     the API carries its String().
//   - The opener seam (opener.go): shardOpener's Open (claim, lease wait,
//     seal, hydrate, replay, open a writer: the recovery package) and
//     Adopt (a handoff's target: the stored fencing, the newest marker's
//     term, relocation.Adopt) are everything that touches the protocol
//     across terms; recovery.go is the production implementation. Tests
//     swap it to drive the service against the real fence and translog.
//
// Read plans its generations with seal.History.Ranges and cuts them with
// translog.SeqWindow; Inspect renders seal.Describe; checkpoints are
// published from, and restored into, seal.MemFiles (an fs.FS), so no call
// writes a local file. server.go routes each call to the file of its
// concern (open.go, append.go, read.go, handoff.go, admin.go, inspect.go,
// close.go); handler.go maps the API onto it, health.go and
// httplimits.go guard it. docs/ARCHITECTURE.md ("Sidecar") follows an
// open, an append and a handoff through these files.
package sidecar
