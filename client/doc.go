// Package client is the Go client of a shardfence sidecar, for the shard
// primary next to it: appends over one long-lived AppendStream per shard,
// with concurrent callers coalesced onto it, and the shard's Open, Read,
// Watch and Status calls.
//
//	c, err := client.New("unix:///run/shardfence.sock")          // or "127.0.0.1:7400", "https://host:7400"
//	defer c.Close()
//	ack, err := c.Shard("orders-3").Append(ctx, []byte("op"))     // safe for concurrent use
//	switch {
//	case err == nil:                  // durable and fenced: ack.FirstSeqNo .. ack.FirstSeqNo+ack.Count-1
//	case client.IsFenced(err):        // a higher term owns the shard: stop writing here
//	case client.IsOutcomeUnknown(err): // the op may or may not be in the log (see below)
//	}
//
// # Appends
//
// Shard(name).Append(ctx, ops...) returns once the ops are durable in the
// store and the shard's fence proved this term still owns it, exactly as a
// unary Append. The ops of one call are contiguous in the log and keep
// their order; calls of one goroutine made one after the other are in the
// log in that order. Concurrent calls are coalesced: a sender takes every
// call waiting when it is free (after WithLinger, if set) and sends them as
// one request on the shard's stream, and the sidecar queues each request in
// the shard's writer as it arrives, so a closed loop of callers keeps the
// writer's group commit full. Callers an answer just acknowledged are
// waited for before the next request (until they are back, at most 100
// microseconds), so a closed loop sends about one request per sync rather
// than one per caller. The sidecar acknowledges in order of
// durability; each caller gets the sequence numbers of its own ops.
//
// # What a failed Append means
//
// An Append error is an *Error. Either none of the call's ops was written,
// or the outcome is unknown: IsOutcomeUnknown(err) says which.
//
//   - Not written: the call was refused before any of its ops reached the
//     shard's writer (an op over the sidecar's limits, the shard not open
//     here, handed off, fenced before the request was admitted, the
//     caller's context ending before the call was sent). Sending the ops
//     again cannot duplicate them.
//   - Outcome unknown: the call's request reached the shard's writer (or may
//     have: the connection broke after it was sent) and no acknowledgement
//     came back: the caller's context ended first (a timeout), the shard was
//     fenced or closed with the request in flight, or the connection or the
//     sidecar died. The ops may be in the log, or may appear in it later:
//     a sync in flight can still land. They are never acknowledged by this
//     term once it is fenced.
//
// After an unknown outcome, find out with Read: remember the sequence
// number after the last op you saw acknowledged (ack.FirstSeqNo +
// ack.Count), and Read from there; the ops are opaque to the sidecar, so
// recognise yours by an id you put in them. The answer is final once the
// log cannot change under you any more: after a later Append on the same
// shard and term was acknowledged (the writer acknowledges in order and
// fails everything after a failure, so every op queued before an
// acknowledged one was acknowledged too), or after the shard was sealed by
// a successor term (its restore point is the lineage; Read on the new
// primary). A Read before either may miss an op whose sync is still in
// flight. Do not resend an op of unknown outcome without checking: it
// would be in the log twice.
//
// # Retries
//
// The client retries only what cannot duplicate or lose an op: a call
// that was never sent (no stream could be opened: it waits, with backoff,
// until its context ends), a request the sidecar refused as a whole before
// writing any of it because another caller's ops were in it (each call is
// sent again alone), a request the sidecar did not admit because it held
// too many request bytes (sidecar_busy), and, with WithRedirect, calls not
// written because the shard was handed off (sent to the new owner). Read
// resumes after the last batch it delivered when the connection breaks.
// Nothing else is retried.
//
// The package imports only the API, ConnectRPC and the standard library:
// `go list -deps ./client` names no store SDK.
package client
