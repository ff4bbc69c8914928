// Package rpcerr reads the typed details a server attached to a Connect
// error (a sidecar's or a master's ErrorDetail: its reason, terms, owner).
package rpcerr

import (
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
)

// Detail is the first detail of type T in err (wrapped or not), and
// whether there is one.
func Detail[T proto.Message](err error) (T, bool) {
	var zero T
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return zero, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if t, ok := v.(T); ok {
				return t, true
			}
		}
	}
	return zero, false
}
