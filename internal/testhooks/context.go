package testhooks

// The checker's switches: with them the protocol checker (package verify)
// runs a deliberately wrong design of the production code, to show that
// it refutes it with a trace. A switch rides on the context a component is
// opened with (the checker runs many worlds at once, so a global would
// not do); nothing outside this module can set one, and production code
// never does.

import "context"

// Switch names one wrong design.
type Switch int

const (
	// ClaimIsFirstCheck: a create-only translog writer counts its claim
	// as a fence check that found it the owner, and so acknowledges its
	// first generations on their md creates alone, before any fence check
	// it sent answered (the behaviour before docs/VERIFICATION.md,
	// finding 8, was fixed).
	ClaimIsFirstCheck Switch = iota + 1
)

type key struct{}

// With returns ctx with s turned on.
func With(ctx context.Context, s Switch) context.Context {
	on, _ := ctx.Value(key{}).(map[Switch]bool)
	next := map[Switch]bool{s: true}
	for k := range on {
		next[k] = true
	}
	return context.WithValue(ctx, key{}, next)
}

// On reports whether s is turned on in ctx.
func On(ctx context.Context, s Switch) bool {
	on, _ := ctx.Value(key{}).(map[Switch]bool)
	return on[s]
}
