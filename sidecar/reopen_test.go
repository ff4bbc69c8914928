package sidecar

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/seal"
)

// A term that wrote cannot be opened again (a restart must ask for a
// higher term): the refusal says so, not that a successor took the shard.
func TestReopenOfWrittenTermSaysOpenAHigherTerm(t *testing.T) {
	store := mem.New()
	a, err := New(t.Context(), store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Open(t.Context(), "s", 1, "alloc-a", Settings{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(t.Context(), "s", [][]byte{[]byte("x")}, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := New(t.Context(), store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	_, err = b.Open(t.Context(), "s", 1, "alloc-a", Settings{}, nil)
	if err == nil {
		t.Fatal("reopened a term that wrote")
	}
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, seal.ErrTermAlreadyOpen) {
		t.Fatalf("reopen error %v, want a sidecar *Error wrapping seal.ErrTermAlreadyOpen", err)
	}
	if strings.Contains(e.Hint, "successor") || !strings.Contains(e.Hint, "higher term") {
		t.Errorf("hint %q, want it to ask for a higher term", e.Hint)
	}

	// Another allocation asking for the same term is fenced by its owner,
	// which is no successor either.
	_, err = b.Open(t.Context(), "s", 1, "alloc-b", Settings{}, nil)
	if !errors.As(err, &e) || !errors.Is(err, fence.ErrFenced) {
		t.Fatalf("open of a taken term: %v, want a sidecar *Error wrapping fence.ErrFenced", err)
	}
	if strings.Contains(e.Hint, "successor") || !strings.Contains(e.Hint, "higher term") {
		t.Errorf("hint %q, want it to ask for a higher term", e.Hint)
	}
}
