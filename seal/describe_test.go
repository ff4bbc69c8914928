package seal_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shardfence/shardfence/blobstore/faulty"
	"github.com/shardfence/shardfence/layout"
	"github.com/shardfence/shardfence/seal"
	"github.com/shardfence/shardfence/translog"
)

// Describe lists every term's translog with its poisons: the one Inspect
// found below an orphan that landed past it, and a poison that is the
// newest md of the newest term (a successor's cut in progress, before its
// marker), which only a read of that md shows.
func TestDescribeListsEveryTermsTranslogAndPoisons(t *testing.T) {
	forEach(t, func(t *testing.T, store *faulty.Container) {
		ctx := context.Background()
		build(t, store)
		d, err := seal.Describe(ctx, store.Container, shard, seal.Options{Backoff: fastRetry})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Settings.Found || d.Settings.Err != nil || d.Settings.Fencing.Mode != translog.PerSync || d.Settings.OutOfRange != nil {
			t.Errorf("settings %+v", d.Settings)
		}
		// Term 2 wrote 5..7; term 1 wrote 1..4, was poisoned at 5, and a
		// zombie md landed at 6.
		want := "[{2 5 7 3 [] } {1 1 6 6 [5] }]"
		if got := fmt.Sprint(d.Translog); got != want {
			t.Errorf("translog %s, want %s", got, want)
		}
		if len(d.Unexpected) != 0 || len(d.Poisons) != 1 || len(d.Markers) != 2 {
			t.Errorf("unexpected %v, poisons %v, markers %d", d.Unexpected, d.Poisons, len(d.Markers))
		}

		body, err := translog.EncodePoison(shard, 2, 8, 3)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Inner().CreateIfAbsent(ctx, layout.MDKey(2, 8), body); err != nil {
			t.Fatal(err)
		}
		d, err = seal.Describe(ctx, store.Container, shard, seal.Options{Backoff: fastRetry})
		if err != nil {
			t.Fatal(err)
		}
		want = "[{2 5 8 4 [8] } {1 1 6 6 [5] }]"
		if got := fmt.Sprint(d.Translog); got != want {
			t.Errorf("translog with a cut in progress %s, want %s", got, want)
		}
	})
}
