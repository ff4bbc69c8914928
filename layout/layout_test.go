package layout

import (
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestInvSortsHighestFirst(t *testing.T) {
	terms := []int64{0, 1, 2, 9, 10, 11, 99, 100, 1 << 40, math.MaxInt64}
	keys := make([]string, len(terms))
	for i, term := range terms {
		keys[i] = FenceKey(term)
		if len(Inv(term)) != 19 {
			t.Fatalf("Inv(%d) = %q, want 19 digits", term, Inv(term))
		}
		if got, ok := ParseInv(Inv(term)); !ok || got != term {
			t.Fatalf("ParseInv(Inv(%d)) = %d, %v", term, got, ok)
		}
	}
	sort.Strings(keys)
	for i, k := range keys {
		want := terms[len(terms)-1-i]
		got, ok := ParseFenceKey(k)
		if want == 0 {
			if ok {
				t.Fatalf("ParseFenceKey accepted term 0 in %q", k)
			}
			continue
		}
		if !ok || got != want {
			t.Fatalf("sorted key %d = %q parses to %d, %v; want %d", i, k, got, ok, want)
		}
	}
}

// Every key kind parses back to what built it, and no parser accepts
// another kind's key: a LIST of one folder may hold strays, and a stray
// must never be taken for a protocol key.
func TestKeysRoundTripAndNeverParseAsAnotherKind(t *testing.T) {
	type kind struct {
		name  string
		build func(p TermGen) string
		parse func(key string) (TermGen, bool)
	}
	termOnly := func(parse func(string) (int64, bool)) func(string) (TermGen, bool) {
		return func(k string) (TermGen, bool) {
			t, ok := parse(k)
			return TermGen{Term: t}, ok
		}
	}
	kinds := []kind{
		{"fence", func(p TermGen) string { return FenceKey(p.Term) }, termOnly(ParseFenceKey)},
		{"marker", func(p TermGen) string { return MarkerKey(p.Term) }, termOnly(ParseMarkerKey)},
		{"md", func(p TermGen) string { return MDKey(p.Term, p.Gen) }, ParseMDKey},
		{"data", func(p TermGen) string { return DataKey(p.Term, p.Gen) }, ParseDataKey},
		{"manifest", func(p TermGen) string { return ManifestKey(p.Term, p.Gen) }, ParseManifestKey},
		{"file", func(p TermGen) string { return FilePrefix(p.Term, p.Gen) + "seg/0" }, ParseFileKey},
	}
	for _, p := range []TermGen{{1, 1}, {2, 17}, {1 << 40, 1 << 50}, {math.MaxInt64, math.MaxInt64}} {
		for i, k := range kinds {
			key := k.build(p)
			got, ok := k.parse(key)
			want := p
			if k.name == "fence" || k.name == "marker" {
				want.Gen = 0
			}
			if !ok || got != want {
				t.Errorf("%s key %q parses to %v, %v; want %v", k.name, key, got, ok, want)
			}
			for j, other := range kinds {
				if j != i {
					if got, ok := other.parse(key); ok {
						t.Errorf("%s key %q parses as a %s key (%v)", k.name, key, other.name, got)
					}
				}
			}
		}
	}
}

func TestParsersRejectMalformedKeys(t *testing.T) {
	for _, c := range []struct {
		parse func(string) bool
		keys  []string
	}{
		{func(k string) bool { _, ok := ParseFenceKey(k); return ok }, []string{
			"", "fence/", FencePrefix, FencePrefix + "123", FencePrefix + "92233720368547758070",
			FencePrefix + "922337203685477580x", FenceKey(3) + "/x", FencePrefix + "-223372036854775807", FenceKey(0),
		}},
		{func(k string) bool { _, ok := ParseMarkerKey(k); return ok }, []string{"", MarkerPrefix, MarkerKey(0), MarkerKey(2) + "x"}},
		{func(k string) bool { _, ok := ParseMDKey(k); return ok }, []string{
			"", MDPrefix, MDTermPrefix(1), MDTermPrefix(1) + "x", MDKey(1, 1) + "__1", MDPrefix + Inv(0) + "__" + Inv(1), MDKey(1, 0),
		}},
		{func(k string) bool { _, ok := ParseDataKey(k); return ok }, []string{
			"", DataDir, DataDir + "1/2", DataDir + "1/2/3.tlog", DataDir + "0/2.tlog", DataDir + "1/0.tlog", DataDir + "x/2.tlog",
		}},
		{func(k string) bool { _, ok := ParseManifestKey(k); return ok }, []string{"", ManifestPrefix, ManifestTermPrefix(0) + Inv(1), ManifestTermPrefix(1)}},
		{func(k string) bool { _, ok := ParseFileKey(k); return ok }, []string{"", FilesDir, FilesDir + "1/2", FilesDir + "0/2/x", FilesDir + "1/-1/x"}},
	} {
		for _, k := range c.keys {
			if c.parse(k) {
				t.Errorf("%q accepted", k)
			}
		}
	}
	if ManifestKey(3, 0) == "" || !func() bool { _, ok := ParseManifestKey(ManifestKey(3, 0)); return ok }() {
		t.Error("a checkpoint at generation 0 (a term's restore point of a new shard) must parse")
	}
}

func TestFixedSpellings(t *testing.T) {
	for got, want := range map[string]string{
		FenceKey(1):        "fence/fence__9223372036854775806",
		MarkerKey(1):       "seal/seal__9223372036854775806",
		MDKey(1, 2):        "translog/md__9223372036854775806__9223372036854775805",
		DataKey(12, 345):   "translog/data/12/345.tlog",
		ManifestKey(1, 0):  "checkpoint/ckpt__9223372036854775806__9223372036854775807",
		FilePrefix(12, 34): "checkpoint/files/12/34/",
		FencingKey:         "settings/fencing",
	} {
		if got != want {
			t.Errorf("key %q, want %q (the store layout is part of the protocol)", got, want)
		}
	}
}

func TestMDKeysSortNewestFirst(t *testing.T) {
	tgs := []TermGen{{1, 1}, {1, 2}, {1, 10}, {2, 1}, {2, 3}, {10, 11}}
	var keys []string
	for _, p := range tgs {
		keys = append(keys, MDKey(p.Term, p.Gen))
	}
	slices.Sort(keys)
	slices.SortFunc(tgs, func(a, b TermGen) int {
		if b.Less(a) {
			return -1
		}
		return 1
	})
	for i, k := range keys {
		if got, _ := ParseMDKey(k); got != tgs[i] {
			t.Fatalf("listing position %d holds %v, want %v", i, got, tgs[i])
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"a", "shard-1", "A.b_c-9", strings.Repeat("x", MaxNameLen)} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q) = %v", ok, err)
		}
	}
	for name, why := range map[string]string{
		"":                                "is empty",
		strings.Repeat("x", MaxNameLen+1): "is 129 bytes long",
		".hidden":                         "starts with '.' or '-'",
		"-flag":                           "starts with '.' or '-'",
		"a/b":                             `has '/' at byte 1`,
		"a\x00":                           "has 0x00 at byte 1",
	} {
		if err := CheckName(name); err == nil || err.Error() != why {
			t.Errorf("CheckName(%q) = %v, want %q", name, err, why)
		}
	}
}
