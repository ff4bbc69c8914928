// Package sidecar is the shard-writer service that runs next to each shard
// primary: it opens shards at a term (claim, seal, restore), turns appends
// into fenced, group-committed translog syncs, streams the lineage back,
// and reports status and metrics. The API is the ConnectRPC service of
// api/sidecar/v1, so gRPC, gRPC-Web and JSON clients all reach the same
// handlers.
//
// A shard's lifecycle (claim, seal, restore, handoff) goes through one
// small seam, shardOpener, whose production implementation is the
// protocol's recovery path; the service itself only holds the open writers,
// validates input, maps errors to API codes and drains on shutdown.
package sidecar
