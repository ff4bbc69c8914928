package fence

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/layout"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []Record{
		{Shard: "s1", Term: 1, Allocation: "a"},
		{Shard: "s1", Term: 1, Allocation: "a", Nonce: "0123456789abcdef0123456789abcdef"},
		{Shard: "idx/0", Term: math.MaxInt64, Allocation: "alloc-7", Node: "node 3", Seq: 12, Gen: 99},
		{Shard: "ünïcode", Term: 5, Allocation: "x", Seq: math.MaxInt64, Gen: math.MaxInt64},
	} {
		body, err := r.Encode()
		if err != nil {
			t.Fatalf("Encode(%+v): %v", r, err)
		}
		got, err := DecodeRecord(r.Shard, layout.FenceKey(r.Term), body)
		if err != nil {
			t.Fatalf("DecodeRecord(%q): %v", body, err)
		}
		if got != r {
			t.Fatalf("round trip: got %+v, want %+v", got, r)
		}
	}
}

func TestRecordEncodeRejectsBadFields(t *testing.T) {
	for name, r := range map[string]Record{
		"separator in shard":      {Shard: "a|b", Term: 1, Allocation: "x"},
		"separator in allocation": {Shard: "s", Term: 1, Allocation: "x|y"},
		"separator in node":       {Shard: "s", Term: 1, Allocation: "x", Node: "n|1"},
		"newline in node":         {Shard: "s", Term: 1, Allocation: "x", Node: "n\n1"},
		"empty shard":             {Term: 1, Allocation: "x"},
		"empty allocation":        {Shard: "s", Term: 1},
		"term zero":               {Shard: "s", Allocation: "x"},
		"negative seq":            {Shard: "s", Term: 1, Allocation: "x", Seq: -1},
		"long allocation":         {Shard: "s", Term: 1, Allocation: strings.Repeat("a", MaxIDLen+1)},
		"invalid utf8":            {Shard: "s\xff", Term: 1, Allocation: "x"},
		"separator in nonce":      {Shard: "s", Term: 1, Allocation: "x", Nonce: "n|1"},
		"control in nonce":        {Shard: "s", Term: 1, Allocation: "x", Nonce: "n\t1"},
		"long nonce":              {Shard: "s", Term: 1, Allocation: "x", Nonce: strings.Repeat("f", MaxNonceLen+1)},
	} {
		if _, err := r.Encode(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: Encode error %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	good := "shardfence.fence|v1|s|3|a|n|4|2|k1"
	cases := []struct {
		name, shard, key, body string
		want                   error
	}{
		{"empty", "s", layout.FenceKey(3), "", ErrCorruptBody},
		{"garbage", "s", layout.FenceKey(3), "\x00\x01garbage", ErrCorruptBody},
		{"other tag", "s", layout.FenceKey(3), "shardfence.seal|v1|s|3|a|n|4|2|k1", ErrCorruptBody},
		{"future version", "s", layout.FenceKey(3), "shardfence.fence|v2|s|3|a|n|4|2|k1", ErrUnknownVersion},
		{"missing field", "s", layout.FenceKey(3), "shardfence.fence|v1|s|3|a|n|4|2", ErrCorruptBody},
		{"extra field", "s", layout.FenceKey(3), good + "|9", ErrCorruptBody},
		{"not a number", "s", layout.FenceKey(3), "shardfence.fence|v1|s|3|a|n|x|2|k1", ErrCorruptBody},
		{"plus sign", "s", layout.FenceKey(3), "shardfence.fence|v1|s|+3|a|n|4|2|k1", ErrCorruptBody},
		{"leading zero", "s", layout.FenceKey(3), "shardfence.fence|v1|s|03|a|n|4|2|k1", ErrCorruptBody},
		{"nonce too long", "s", layout.FenceKey(3), "shardfence.fence|v1|s|3|a|n|4|2|" + strings.Repeat("f", MaxNonceLen+1), ErrCorruptBody},
		{"control in nonce", "s", layout.FenceKey(3), "shardfence.fence|v1|s|3|a|n|4|2|k\x001", ErrCorruptBody},
		{"term zero", "s", layout.FenceKey(1), "shardfence.fence|v1|s|0|a|n|4|2|k1", ErrCorruptBody},
		{"other shard", "t", layout.FenceKey(3), good, ErrForeignShard},
		{"other term than key", "s", layout.FenceKey(4), good, ErrForeignShard},
	}
	for _, c := range cases {
		_, err := DecodeRecord(c.shard, c.key, []byte(c.body))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
			continue
		}
		var be *BodyError
		if !errors.As(err, &be) || be.Shard != c.shard || be.Key != c.key {
			t.Errorf("%s: error %v does not name shard %q and key %q", c.name, err, c.shard, c.key)
		}
		if errors.Is(err, ErrFenced) {
			t.Errorf("%s: a bad body must not read as a fencing verdict", c.name)
		}
	}
	if _, err := DecodeRecord("s", layout.FenceKey(3), []byte(good)); err != nil {
		t.Fatalf("good body rejected: %v", err)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte("shardfence.fence|v1|s|3|a|n|4|2|0123456789abcdef0123456789abcdef"))
	f.Add([]byte("shardfence.fence|v1|s|3|a||0|0|"))
	f.Add([]byte("shardfence.fence|v1|s|3|a||0|0|n1|"))
	f.Add([]byte("shardfence.fence|v1|s|3|a|n|4|2"))
	f.Add([]byte("shardfence.fence|v2|s|3|a|n|4|2|k1"))
	f.Add([]byte("||||||||"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeRecord("s", "fence/other", body)
		if err != nil {
			var be *BodyError
			if !errors.As(err, &be) {
				t.Fatalf("decode error %T is not a *BodyError: %v", err, err)
			}
			return
		}
		// Whatever decodes must re-encode to the very same bytes: records
		// are compared to settle lost responses.
		again, err := r.Encode()
		if err != nil || string(again) != string(body) {
			t.Fatalf("decoded %+v from %q but re-encodes to %q, %v", r, body, again, err)
		}
	})
}
