package blobstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ProbePrefix is where ProbePreconditions writes its scratch keys.
const ProbePrefix = "shardfence-probe/"

// ProbePreconditions checks, on a scratch key, that the store enforces the
// preconditions fencing relies on: a second create-if-absent fails, a CAS
// with a stale token fails and leaves the content alone, and a CAS on a
// missing key fails. A store that accepts any of these is refused with
// ErrPreconditionsNotEnforced and a message naming the store and the check.
// The scratch key is removed afterwards.
func ProbePreconditions(ctx context.Context, c *Container) error {
	var rnd [12]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	key := ProbePrefix + hex.EncodeToString(rnd[:])
	defer func() { _ = c.Delete(context.WithoutCancel(ctx), key) }()

	refuse := func(what string) error {
		return fmt.Errorf("%w: %s %s; fenced writes cannot run on this store (use a store with conditional writes: S3 If-None-Match/If-Match, GCS generations, Azure ETags)", ErrPreconditionsNotEnforced, c, what)
	}
	caps := c.Capabilities()
	if !caps.ConditionalCreate || !caps.ConditionalUpdate {
		return refuse("does not advertise conditional create and update")
	}

	bodyA, bodyB, bodyC := []byte("probe-a-"+key), []byte("probe-b-"+key), []byte("probe-c-"+key)
	tokA, err := c.CreateIfAbsent(ctx, key, bodyA)
	if err != nil {
		return fmt.Errorf("precondition probe on %s: first create: %w", c, err)
	}
	if _, err := c.CreateIfAbsent(ctx, key, bodyC); err == nil {
		return refuse("accepted a second create-if-absent of the same key")
	} else if !errors.Is(err, ErrAlreadyExists) {
		return fmt.Errorf("precondition probe on %s: second create: %w", c, err)
	}
	tokB, err := c.CompareAndSwap(ctx, key, tokA, bodyB)
	if err != nil {
		return fmt.Errorf("precondition probe on %s: CAS with the current token: %w", c, err)
	}
	if tokB == tokA {
		return refuse("returned the same version token for different content")
	}
	if _, err := c.CompareAndSwap(ctx, key, tokA, bodyC); err == nil {
		return refuse("accepted a compare-and-swap with a stale token")
	} else if !errors.Is(err, ErrPreconditionFailed) {
		return fmt.Errorf("precondition probe on %s: stale CAS: %w", c, err)
	}
	obj, err := c.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("precondition probe on %s: read back: %w", c, err)
	}
	if !bytes.Equal(obj.Body, bodyB) || obj.Token != tokB {
		return refuse("changed the object on a refused compare-and-swap")
	}
	missing := key + "-missing"
	if _, err := c.CompareAndSwap(ctx, missing, tokB, bodyC); err == nil {
		_ = c.Delete(context.WithoutCancel(ctx), missing)
		return refuse("accepted a compare-and-swap on a missing key")
	} else if !errors.Is(err, ErrPreconditionFailed) {
		return fmt.Errorf("precondition probe on %s: CAS on a missing key: %w", c, err)
	}
	return nil
}
