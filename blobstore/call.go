package blobstore

import (
	"context"
	"io"
)

// Call is one container call on its way to the driver, as middleware sees
// it. Keys are relative to the container the middleware was installed on.
type Call struct {
	Op Op
	// Key is the object's key; for List, the listed prefix.
	Key string
	// Body is the body of Put, CreateIfAbsent and CompareAndSwap. It
	// belongs to the caller, who may reuse it once the call returns: a
	// middleware that keeps the call longer keeps a copy.
	Body []byte
	// Expected is the token of CompareAndSwap and DeleteIfMatch, and the
	// version GetRange is pinned to (empty: any).
	Expected Token
	// Offset and Length are GetRange's range (Length -1: to the end).
	Offset, Length int64
	// After and Limit are List's startAfter and page size (already in
	// 1..DefaultListLimit).
	After string
	Limit int
	// Refusal, when not nil, is why the container refuses the call before
	// any request (an invalid key, a done context, a missing capability, an
	// empty token, a body over the limit): the end of the chain returns it
	// and no store sees the call. Middleware may observe a refused call (a
	// metric counts it); one that injects faults or schedules requests
	// passes it straight on, as no store would have answered otherwise.
	Refusal error
}

// Result is what a call returned: Object for Get, Attrs for Stat, Token for
// the writes, Page for List, Reader and Attrs for GetRange.
type Result struct {
	Object Object
	Attrs  Attrs
	Token  Token
	Page   ListPage
	// Reader is GetRange's stream. A middleware that drops a result it got
	// from next closes it.
	Reader io.ReadCloser
}

// Handler carries a call out: the rest of the middleware chain and the
// driver.
type Handler func(ctx context.Context, call Call) (Result, error)

// Middleware sees a call before the driver does and decides what the caller
// hears: it may pass the call to next (at once, later, or with other
// arguments), answer it itself, or observe what next returned. Errors it
// returns are wrapped in an OpError by the container the caller called, so
// middleware returns plain errors of the blobstore kinds.
type Middleware func(ctx context.Context, call Call, next Handler) (Result, error)

// With returns a container that sends every call through mw before c's own
// middleware and driver; c itself is unchanged. tag, when not empty, shows
// in the new container's String as tag(name), so a message says the store is
// wrapped (a fault injector, say). Keys mw sees are relative to c; a Sub of
// the new container is a view under it, whose calls mw sees with the Sub's
// prefix on their keys.
func (c *Container) With(tag string, mw Middleware) *Container {
	inner := *c
	w := &Container{drv: c.drv, loc: c.loc, tags: c.tags}
	if tag != "" {
		w.tags = append(append([]string(nil), c.tags...), tag)
	}
	next := inner.send // one method value, not one per call
	w.next = func(ctx context.Context, call Call) (Result, error) {
		return mw(ctx, call, next)
	}
	return w
}
