package translog

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/layout"
)

const shard = "idx/0"

func syncMD(payload []byte, inline bool) MD {
	m := MD{Kind: KindSync, Shard: shard, Term: 3, Gen: 7, Allocation: "a1", PrevGen: 6, FirstSeqNo: 100,
		OpCount: 2, PayloadLen: int64(len(payload)), Checksum: Checksum(payload), Inline: inline}
	if inline {
		m.Payload = payload
	}
	return m
}

func TestOpsRoundTrip(t *testing.T) {
	for _, ops := range [][][]byte{{}, {{}}, {[]byte("a")}, {[]byte("one"), {}, bytes.Repeat([]byte{0xff}, 300)}} {
		got, err := DecodeOps(EncodeOps(ops), int64(len(ops)))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ops) {
			t.Fatalf("%d ops, want %d", len(got), len(ops))
		}
		for i := range ops {
			if !bytes.Equal(got[i], ops[i]) {
				t.Fatalf("op %d = %q, want %q", i, got[i], ops[i])
			}
		}
	}
	p := EncodeOps([][]byte{[]byte("abc"), []byte("de")})
	for _, c := range []struct {
		p []byte
		n int64
	}{{p, 1}, {p, 3}, {p[:len(p)-1], 2}, {p, -1}, {[]byte{0x80}, 1}, {[]byte{5, 1}, 1}} {
		if _, err := DecodeOps(c.p, c.n); err == nil {
			t.Errorf("DecodeOps(%x, %d) accepted", c.p, c.n)
		}
	}
}

func TestMDRoundTrip(t *testing.T) {
	payload := EncodeOps([][]byte{[]byte("x"), []byte("yz")})
	for _, m := range []MD{
		syncMD(payload, true),
		syncMD(payload, false),
		{Kind: KindPoison, Shard: shard, Term: 3, Gen: 7, SealedBy: 4},
	} {
		body, err := EncodeMD(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeMD(shard, layout.MDKey(3, 7), body)
		if err != nil {
			t.Fatalf("%v: %v", m.Kind, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip %+v, want %+v", got, m)
		}
	}
}

func TestEncodeMDRejectsBadFields(t *testing.T) {
	p := EncodeOps([][]byte{[]byte("x")})
	bad := map[string]MD{
		"separator in shard":  func() MD { m := syncMD(p, true); m.Shard = "a|b"; return m }(),
		"gen zero":            func() MD { m := syncMD(p, true); m.Gen, m.PrevGen = 0, 0; return m }(),
		"prev not below gen":  func() MD { m := syncMD(p, true); m.PrevGen = 7; return m }(),
		"inline length wrong": func() MD { m := syncMD(p, true); m.PayloadLen++; return m }(),
		"no allocation":       func() MD { m := syncMD(p, true); m.Allocation = ""; return m }(),
		"poison by lower":     {Kind: KindPoison, Shard: shard, Term: 3, Gen: 1, SealedBy: 3},
		"unknown kind":        {Kind: 9, Shard: shard, Term: 3, Gen: 1},
	}
	for name, m := range bad {
		if _, err := EncodeMD(m); !errors.Is(err, fence.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestDecodeMDRejects(t *testing.T) {
	payload := EncodeOps([][]byte{[]byte("hello")})
	good, err := EncodeMD(syncMD(payload, true))
	if err != nil {
		t.Fatal(err)
	}
	key := layout.MDKey(3, 7)
	// Every single flipped byte must be caught.
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x20
		if _, err := DecodeMD(shard, key, b); err == nil {
			t.Fatalf("flipping byte %d went unnoticed", i)
		}
	}
	future := bytes.Clone(good)
	future[len(mdMagic)] = 2
	other, _ := EncodeMD(func() MD { m := syncMD(payload, true); m.Shard = "other"; return m }())
	cases := []struct {
		name, key string
		body      []byte
		want      error
	}{
		{"empty", key, nil, fence.ErrCorruptBody},
		{"garbage", key, []byte("not an md at all"), fence.ErrCorruptBody},
		{"truncated", key, good[:len(good)-5], fence.ErrCorruptBody},
		{"fence body", key, []byte("shardfence.fence|v1|s|3|a|n|4|2|n1"), fence.ErrCorruptBody},
		{"future version", key, future, fence.ErrUnknownVersion},
		{"other shard", key, other, fence.ErrForeignShard},
		{"other generation's key", layout.MDKey(3, 8), good, fence.ErrForeignShard},
		{"data body", key, EncodeData(shard, 3, 7, payload), fence.ErrCorruptBody},
	}
	for _, c := range cases {
		_, err := DecodeMD(shard, c.key, c.body)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		var be *fence.BodyError
		if !errors.As(err, &be) || be.Key != c.key || be.Shard != shard {
			t.Errorf("%s: %v does not name the shard and key", c.name, err)
		}
	}
}

func TestDataRoundTripAndRejects(t *testing.T) {
	payload := EncodeOps([][]byte{bytes.Repeat([]byte("z"), 1000)})
	key := layout.DataKey(3, 7)
	body := EncodeData(shard, 3, 7, payload)
	got, err := DecodeData(shard, key, 3, 7, body)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("round trip: %v", err)
	}
	for name, c := range map[string]struct {
		body []byte
		gen  int64
		want error
	}{
		"other generation": {body, 8, fence.ErrForeignShard},
		"flipped byte":     {func() []byte { b := bytes.Clone(body); b[40] ^= 1; return b }(), 7, fence.ErrCorruptBody},
		"md body":          {func() []byte { b, _ := EncodeMD(syncMD(payload, true)); return b }(), 7, fence.ErrCorruptBody},
	} {
		if _, err := DecodeData(shard, key, 3, c.gen, c.body); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func FuzzDecodeMD(f *testing.F) {
	payload := EncodeOps([][]byte{[]byte("a"), []byte("bc")})
	for _, m := range []MD{syncMD(payload, true), syncMD(payload, false), {Kind: KindPoison, Shard: shard, Term: 3, Gen: 7, SealedBy: 9}} {
		b, _ := EncodeMD(m)
		f.Add(b)
	}
	f.Add([]byte("SFTLMD\x01"))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := DecodeMD(shard, "translog/fuzz", body)
		if err != nil {
			var be *fence.BodyError
			if !errors.As(err, &be) {
				t.Fatalf("error %T is not a *fence.BodyError: %v", err, err)
			}
			return
		}
		again, err := EncodeMD(m)
		if err != nil || !bytes.Equal(again, body) {
			t.Fatalf("decoded %+v but re-encodes differently (%v)", m, err)
		}
		if m.Kind == KindSync && m.Inline {
			// A well-formed md may carry ops that do not parse; the reader
			// reports that as an error, which must not panic either.
			_, _ = DecodeOps(m.Payload, m.OpCount)
		}
	})
}

func FuzzDecodeData(f *testing.F) {
	f.Add(EncodeData(shard, 3, 7, EncodeOps([][]byte{[]byte("x")})))
	f.Add(EncodeData(shard, 3, 7, nil))
	f.Add([]byte("SFTLDT\x01\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodeData(shard, "translog/data/3/7.tlog", 3, 7, body)
		if err != nil {
			var be *fence.BodyError
			if !errors.As(err, &be) {
				t.Fatalf("error %T is not a *fence.BodyError: %v", err, err)
			}
			return
		}
		if !bytes.Equal(EncodeData(shard, 3, 7, p), body) {
			t.Fatal("decoded data does not re-encode to the same bytes")
		}
	})
}

func FuzzDecodeOps(f *testing.F) {
	f.Add(EncodeOps([][]byte{[]byte("a"), {}, []byte("long op")}), int64(3))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, int64(1))
	f.Add([]byte{}, int64(0))
	f.Fuzz(func(t *testing.T, payload []byte, count int64) {
		ops, err := DecodeOps(payload, count)
		if err != nil {
			return
		}
		if int64(len(ops)) != count || !bytes.Equal(EncodeOps(ops), payload) {
			t.Fatalf("%d ops from %x do not re-encode to the input", len(ops), payload)
		}
	})
}

func TestBatchOf(t *testing.T) {
	ops := [][]byte{[]byte("a"), []byte("bc")}
	payload := EncodeOps(ops)
	want := Batch{Term: 3, Gen: 7, FirstSeqNo: 100, Ops: ops}
	other := EncodeOps([][]byte{[]byte("x"), []byte("yz")})
	short := syncMD(payload, false)
	short.OpCount = 3
	for _, tc := range []struct {
		name string
		md   MD
		data []byte
		key  string // the key a refusal names; "" for success
	}{
		{"inline", syncMD(payload, true), nil, ""},
		{"inline, the data ignored", syncMD(payload, true), []byte("junk"), ""},
		{"data object", syncMD(payload, false), EncodeData(shard, 3, 7, payload), ""},
		{"data object of another generation", syncMD(payload, false), EncodeData(shard, 3, 8, payload), layout.DataKey(3, 7)},
		{"data object of another shard", syncMD(payload, false), EncodeData("other", 3, 7, payload), layout.DataKey(3, 7)},
		{"data object with other bytes", syncMD(payload, false), EncodeData(shard, 3, 7, other), layout.DataKey(3, 7)},
		{"no data object body", syncMD(payload, false), nil, layout.DataKey(3, 7)},
		{"ops that do not match the count", short, EncodeData(shard, 3, 7, payload), layout.MDKey(3, 7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := BatchOf(shard, tc.md, tc.data)
			if tc.key == "" {
				if err != nil || !reflect.DeepEqual(b, want) {
					t.Fatalf("BatchOf = %+v, %v; want %+v", b, err, want)
				}
				return
			}
			var be *fence.BodyError
			if !errors.As(err, &be) || be.Key != tc.key {
				t.Fatalf("BatchOf = %v, want a body error naming %q", err, tc.key)
			}
		})
	}
}
