package conformance_test

import (
	"testing"

	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/conformance"
)

func TestMem(t *testing.T) {
	conformance.RunContainer(t, func(t *testing.T) blobstore.Container { return mem.New() })
}

func TestSubOfMem(t *testing.T) {
	conformance.RunContainer(t, func(t *testing.T) blobstore.Container {
		// Another key beside the prefix proves Sub hides what is outside it.
		m := mem.New()
		if _, err := m.Put(t.Context(), "outside", []byte("x")); err != nil {
			t.Fatal(err)
		}
		c, err := blobstore.Sub(m, "p")
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}
