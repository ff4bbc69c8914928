package master

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// sampleOps records one op of every logged kind from a real master.
func sampleOps(t testing.TB) []*Op {
	j := &memJournal{}
	m, clk := newTestMaster(t, Config{}, Options{Journal: j})
	ctx := context.Background()
	mount(t, m, "c1", 1, 1<<20)
	mount(t, m, "c1", 2, 1<<20)
	put(t, m, "c1", "t", "hard", 100, PutOptions{HardPin: true, Replicas: 2})
	put(t, m, "c1", "t", "soft", 100, PutOptions{SoftPin: true, Group: "g", DataType: 7})
	put(t, m, "c1", "t", "gone", 100, PutOptions{})
	if _, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "t", Key: "open", Size: 10}); err != nil {
		t.Fatal(err)
	}
	if err := m.PutRevoke(ctx, "c1", "t", "open"); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "t", "gone", true); err != nil {
		t.Fatal(err)
	}
	put(t, m, "c1", "t", "evicted", 100, PutOptions{})
	clk.Advance(11 * time.Second) // past the read lease
	m.topo.RLock()
	m.evictLocked(clk.Steady(), 1, nil)
	m.topo.RUnlock()
	if _, err := m.UnmountSegment(ctx, "c1", 2); err != nil {
		t.Fatal(err)
	}
	return j.ops
}

func TestEntryRoundTrip(t *testing.T) {
	ops := sampleOps(t)
	kinds := map[OpKind]bool{}
	for _, op := range ops {
		b, err := EncodeEntry(op)
		if err != nil {
			t.Fatalf("encode %v: %v", op.Kind, err)
		}
		back, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("decode %v: %v", op.Kind, err)
		}
		if back.Kind != op.Kind || back.Tenant != op.Tenant || back.Key != op.Key || back.Client != op.Client ||
			!proto.Equal(back.Object, op.Object) || !proto.Equal(back.Segment, op.Segment) {
			t.Fatalf("round trip of %v changed it: %+v -> %+v", op.Kind, op, back)
		}
		kinds[op.Kind] = true
	}
	for _, k := range []OpKind{OpMountSegment, OpUnmountSegment, OpPutEnd, OpPutRevoke, OpRemove, OpEvict} {
		if !kinds[k] {
			t.Errorf("no %v entry in the sample", k)
		}
	}
}

// Unknown versions and kinds, foreign bytes, and bodies that lack what
// their kind needs are refused with a typed error naming the cause.
func TestEntryRefusals(t *testing.T) {
	good, err := EncodeEntry(&Op{Kind: OpRemove, Tenant: "t", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	with := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] = v
		return b
	}
	body := func(k OpKind, e *masterv1.OplogEntry) []byte {
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{'S', 'F', 'M', 'O', 'P', StandbyWireVersion, byte(k)}, b...)
	}
	seg := &masterv1.StandbySegment{Id: 1, Size: 10, ClientId: "c"}
	obj := &masterv1.StandbyObject{Tenant: "t", Key: "k", ClientId: "c", Replicas: []*masterv1.StandbyReplica{mem(1, 0, 4)}}
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrEntryMalformed},
		{"foreign magic", with(0, 'X'), ErrEntryMalformed},
		{"newer version", with(5, StandbyWireVersion+1), ErrEntryVersion},
		{"snapshot version number", with(5, 2), ErrEntryVersion},
		{"unknown kind", with(6, 200), ErrEntryKind},
		{"kind zero", with(6, 0), ErrEntryKind},
		{"truncated body", good[:len(good)-1], ErrEntryMalformed},
		{"garbage body", append(bytes.Clone(good[:7]), 0xff, 0xff, 0xff), ErrEntryMalformed},
		{"mount without segment", body(OpMountSegment, &masterv1.OplogEntry{}), ErrEntryMalformed},
		{"segment without size", body(OpMountSegment, &masterv1.OplogEntry{Segment: &masterv1.StandbySegment{Id: 1, ClientId: "c"}}), ErrEntryMalformed},
		{"segment entry naming an object", body(OpUnmountSegment, &masterv1.OplogEntry{Segment: seg, Key: "k"}), ErrEntryMalformed},
		{"remove without key", body(OpRemove, &masterv1.OplogEntry{Tenant: "t"}), ErrEntryMalformed},
		{"remove with object", body(OpRemove, &masterv1.OplogEntry{Tenant: "t", Key: "k", Object: obj}), ErrEntryMalformed},
		{"put end without object", body(OpPutEnd, &masterv1.OplogEntry{Tenant: "t", Key: "k"}), ErrEntryMalformed},
		{"object of another key", body(OpPutEnd, &masterv1.OplogEntry{Tenant: "t", Key: "other", Object: obj}), ErrEntryMalformed},
		{"memory replica without segment", body(OpPutEnd, &masterv1.OplogEntry{Tenant: "t", Key: "k", Object: &masterv1.StandbyObject{Tenant: "t", Key: "k", ClientId: "c", Replicas: []*masterv1.StandbyReplica{mem(0, 0, 4)}}}), ErrEntryMalformed},
		{"replica range overflows", body(OpEvict, &masterv1.OplogEntry{Tenant: "t", Key: "k", Object: &masterv1.StandbyObject{Tenant: "t", Key: "k", ClientId: "c", Replicas: []*masterv1.StandbyReplica{mem(1, 1<<63, 1<<63)}}}), ErrEntryMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			op, err := DecodeEntry(c.b)
			if !errors.Is(err, c.want) || op != nil {
				t.Fatalf("decode: op %v, error %v, want %v", op, err, c.want)
			}
			var ee *EntryError
			if !errors.As(err, &ee) {
				t.Fatalf("%v is not an *EntryError", err)
			}
		})
	}
	if _, err := EncodeEntry(&Op{Kind: OpPutEnd, Tenant: "t", Key: "k"}); !errors.Is(err, ErrEntryMalformed) {
		t.Fatalf("encoding an entry no reader accepts: %v", err)
	}
	if _, err := EncodeEntry(&Op{Kind: 99}); !errors.Is(err, ErrEntryKind) {
		t.Fatalf("encoding an unknown kind: %v", err)
	}
}

// FuzzDecodeEntry: no input panics the decoder, and whatever it accepts
// re-encodes to an entry that decodes to the same op. The seed corpus runs
// as a normal test.
func FuzzDecodeEntry(f *testing.F) {
	for _, op := range sampleOps(f) {
		b, err := EncodeEntry(op)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte("SFMOP"))
	f.Add([]byte{'S', 'F', 'M', 'O', 'P', 1, byte(OpPutEnd), 0x22, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		op, err := DecodeEntry(b)
		if err != nil {
			var ee *EntryError
			if op != nil || !errors.As(err, &ee) {
				t.Fatalf("refusal %v (op %v) is not a bare *EntryError", err, op)
			}
			return
		}
		again, err := EncodeEntry(op)
		if err != nil {
			t.Fatalf("accepted entry does not re-encode: %v", err)
		}
		back, err := DecodeEntry(again)
		if err != nil || back.Kind != op.Kind || back.Key != op.Key || back.Tenant != op.Tenant || back.Client != op.Client ||
			!proto.Equal(back.Object, op.Object) || !proto.Equal(back.Segment, op.Segment) {
			t.Fatalf("re-encoded entry decodes to %+v, %v; want %+v", back, err, op)
		}
	})
}
