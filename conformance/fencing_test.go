package conformance_test

import (
	"github.com/shardfence/shardfence/blobstore"
	"github.com/shardfence/shardfence/blobstore/faulty"
	"testing"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/conformance"
)

func TestFencingOnMem(t *testing.T) {
	conformance.RunSuiteWithLimits(t, conformance.FencingSuite, mem.New(), nil)
}

func TestFencingTeethProbe(t *testing.T) {
	for _, ops := range []faulty.OpSet{faulty.Ops(blobstore.OpCompareAndSwap), faulty.Ops(blobstore.OpCreateIfAbsent)} {
		f := faulty.New(mem.New(), 1)
		f.IgnorePreconditionsOf(ops)
		rep := conformance.Run(t.Context(), f.Container, conformance.Options{Suite: conformance.FencingSuite})
		for _, r := range rep.Results {
			t.Logf("%v %s %s %q", ops, r.Name, r.Status, r.Details)
		}
	}
}
