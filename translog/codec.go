package translog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/shardfence/shardfence/fence"
	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/layout"
)

// Kind tells a sync record from a poison.
type Kind uint8

const (
	// KindSync is a generation written by a primary.
	KindSync Kind = 1
	// KindPoison is written by a successor at the first generation of a
	// lineage it did not find, so the old primary can never create it.
	KindPoison Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindSync:
		return "sync"
	case KindPoison:
		return "poison"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MD is the immutable record of one generation.
type MD struct {
	Kind  Kind
	Shard string
	Term  int64
	Gen   int64

	// Sync fields.
	Allocation string // the writer; a lost create response is ours only if this matches
	PrevGen    int64  // the generation this one follows (Gen-1 within a term)
	FirstSeqNo int64  // sequence number of the first op
	OpCount    int64
	PayloadLen int64
	Checksum   uint32 // CRC-32C of the payload
	Inline     bool   // payload inline, else in layout.DataKey(Term, Gen)
	Payload    []byte // when Inline

	// Poison field.
	SealedBy int64 // the successor term that poisoned this generation
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C every md and data body uses.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

const (
	mdMagic     = "SFTLMD"
	dataMagic   = "SFTLDT"
	codecV1     = 1
	maxOps      = 1 << 32
	trailerSize = 4
)

// EncodeOps packs ops into a payload: each op as a uvarint length and its
// bytes.
func EncodeOps(ops [][]byte) []byte {
	n := 0
	for _, op := range ops {
		n += binary.MaxVarintLen64 + len(op)
	}
	out := make([]byte, 0, n)
	for _, op := range ops {
		out = binary.AppendUvarint(out, uint64(len(op)))
		out = append(out, op...)
	}
	return out
}

// DecodeOps unpacks exactly count ops from payload.
func DecodeOps(payload []byte, count int64) ([][]byte, error) {
	// Every op takes at least its one-byte length, which bounds the
	// allocation below by the input size.
	if count < 0 || count > int64(len(payload)) {
		return nil, fmt.Errorf("%d ops cannot fit in %d bytes", count, len(payload))
	}
	ops := make([][]byte, 0, count)
	p := payload
	for i := int64(0); i < count; i++ {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return nil, fmt.Errorf("op %d: bad length", i)
		}
		ops = append(ops, p[k:k+int(n)])
		p = p[k+int(n):]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d bytes after the last of %d ops", len(p), count)
	}
	return ops, nil
}

type enc struct{ b []byte }

func (e *enc) str(s string)   { e.b = binary.AppendUvarint(e.b, uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) num(v int64)    { e.b = binary.AppendUvarint(e.b, uint64(v)) }
func (e *enc) u8(v uint8)     { e.b = append(e.b, v) }
func (e *enc) u32(v uint32)   { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) bytes(p []byte) { e.b = append(e.b, p...) }
func (e *enc) seal() []byte   { return binary.BigEndian.AppendUint32(e.b, Checksum(e.b)) }

type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *dec) u8() uint8 {
	if d.err != nil || len(d.b) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) u32() uint32 {
	if d.err != nil || len(d.b) < 4 {
		d.fail("truncated")
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *dec) num(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, k := binary.Uvarint(d.b)
	if k <= 0 || v > math.MaxInt64 {
		d.fail("bad %s", what)
		return 0
	}
	d.b = d.b[k:]
	return int64(v)
}

func (d *dec) take(n int64, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > int64(len(d.b)) {
		d.fail("%s of %d bytes runs past the end", what, n)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) str(what string) string { return string(d.take(d.num(what+" length"), what)) }

// EncodeMD returns the md body. The layout is a magic, a version, the kind,
// the fields as uvarints and length-prefixed strings, and a CRC-32C of
// everything before it.
func EncodeMD(m MD) ([]byte, error) {
	if err := ident.Validate("shard", m.Shard, false); err != nil {
		return nil, err
	}
	if m.Term < 1 || m.Gen < 1 {
		return nil, fmt.Errorf("%w: md term %d gen %d (both start at 1)", fence.ErrInvalidArgument, m.Term, m.Gen)
	}
	e := enc{b: make([]byte, 0, 64+len(m.Payload))}
	e.bytes([]byte(mdMagic))
	e.u8(codecV1)
	e.u8(uint8(m.Kind))
	e.str(m.Shard)
	e.num(m.Term)
	e.num(m.Gen)
	switch m.Kind {
	case KindSync:
		if err := ident.Validate("allocation", m.Allocation, false); err != nil {
			return nil, err
		}
		if m.PrevGen < 0 || m.PrevGen >= m.Gen || m.FirstSeqNo < 0 || m.OpCount < 0 || m.OpCount > maxOps || m.PayloadLen < 0 {
			return nil, fmt.Errorf("%w: md fields out of range (prev %d, gen %d, seqno %d, ops %d, len %d)", fence.ErrInvalidArgument, m.PrevGen, m.Gen, m.FirstSeqNo, m.OpCount, m.PayloadLen)
		}
		if m.Inline && int64(len(m.Payload)) != m.PayloadLen {
			return nil, fmt.Errorf("%w: inline payload of %d bytes, header says %d", fence.ErrInvalidArgument, len(m.Payload), m.PayloadLen)
		}
		e.str(m.Allocation)
		e.num(m.PrevGen)
		e.num(m.FirstSeqNo)
		e.num(m.OpCount)
		e.num(m.PayloadLen)
		e.u32(m.Checksum)
		if m.Inline {
			e.u8(1)
			e.bytes(m.Payload)
		} else {
			e.u8(0)
		}
	case KindPoison:
		if m.SealedBy <= m.Term {
			return nil, fmt.Errorf("%w: poison of term %d by term %d (a successor term is higher)", fence.ErrInvalidArgument, m.Term, m.SealedBy)
		}
		e.num(m.SealedBy)
	default:
		return nil, fmt.Errorf("%w: md kind %d", fence.ErrInvalidArgument, m.Kind)
	}
	return e.seal(), nil
}

// EncodePoison returns the body a successor (term sealedBy) creates at
// generation gen of term to cut the old primary's lineage there.
func EncodePoison(shard string, term, gen, sealedBy int64) ([]byte, error) {
	return EncodeMD(MD{Kind: KindPoison, Shard: shard, Term: term, Gen: gen, SealedBy: sealedBy})
}

func bodyErr(shard, key string, err error, format string, args ...any) error {
	return &fence.BodyError{Shard: shard, Key: key, Err: err, Detail: fmt.Sprintf(format, args...)}
}

// checkFrame verifies magic, version and trailer checksum and returns the
// bytes between the version and the trailer.
func checkFrame(shard, key, magic, what string, body []byte) ([]byte, error) {
	if len(body) < len(magic)+1+trailerSize || string(body[:len(magic)]) != magic {
		return nil, bodyErr(shard, key, fence.ErrCorruptBody, "not a %s body (%d bytes)", what, len(body))
	}
	if v := body[len(magic)]; v != codecV1 {
		return nil, bodyErr(shard, key, fence.ErrUnknownVersion, "%s body version %d, this build reads %d", what, v, codecV1)
	}
	n := len(body) - trailerSize
	if want, got := binary.BigEndian.Uint32(body[n:]), Checksum(body[:n]); want != got {
		return nil, bodyErr(shard, key, fence.ErrCorruptBody, "%s body checksum %08x, computed %08x", what, want, got)
	}
	return body[len(magic)+1 : n], nil
}

// DecodeMD parses the md body stored at key. It verifies the checksum, that
// the body belongs to shard, and that its term and generation are the ones
// the key names (when key is an md key). Errors are *fence.BodyError.
func DecodeMD(shard, key string, body []byte) (MD, error) {
	inner, err := checkFrame(shard, key, mdMagic, "md", body)
	if err != nil {
		return MD{}, err
	}
	d := dec{b: inner}
	var m MD
	m.Kind = Kind(d.u8())
	m.Shard = d.str("shard")
	m.Term = d.num("term")
	m.Gen = d.num("gen")
	switch m.Kind {
	case KindSync:
		m.Allocation = d.str("allocation")
		m.PrevGen = d.num("previous generation")
		m.FirstSeqNo = d.num("first sequence number")
		m.OpCount = d.num("op count")
		m.PayloadLen = d.num("payload length")
		m.Checksum = d.u32()
		switch d.u8() {
		case 1:
			m.Inline = true
			m.Payload = d.take(m.PayloadLen, "inline payload")
		case 0:
		default:
			d.fail("bad storage flag")
		}
	case KindPoison:
		m.SealedBy = d.num("sealing term")
	default:
		d.fail("unknown md kind %d", m.Kind)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return MD{}, bodyErr(shard, key, fence.ErrCorruptBody, "md body: %v", d.err)
	}
	// Re-encoding must reproduce the body: it rejects out-of-range fields
	// the same way the writer does.
	again, err := EncodeMD(m)
	if err != nil || string(again) != string(body) {
		return MD{}, bodyErr(shard, key, fence.ErrCorruptBody, "md body not in canonical form")
	}
	if m.Shard != shard {
		return MD{}, bodyErr(shard, key, fence.ErrForeignShard, "md body names shard %q", m.Shard)
	}
	if p, ok := layout.ParseMDKey(key); ok && (p.Term != m.Term || p.Gen != m.Gen) {
		return MD{}, bodyErr(shard, key, fence.ErrForeignShard, "md body names term %d gen %d under the key of term %d gen %d", m.Term, m.Gen, p.Term, p.Gen)
	}
	if m.Inline && Checksum(m.Payload) != m.Checksum {
		return MD{}, bodyErr(shard, key, fence.ErrCorruptBody, "inline payload checksum %08x, md says %08x", Checksum(m.Payload), m.Checksum)
	}
	return m, nil
}

// EncodeData returns the body of a data object: magic, version, shard, term,
// generation, payload, CRC-32C.
func EncodeData(shard string, term, gen int64, payload []byte) []byte {
	e := enc{b: make([]byte, 0, 48+len(shard)+len(payload))}
	e.bytes([]byte(dataMagic))
	e.u8(codecV1)
	e.str(shard)
	e.num(term)
	e.num(gen)
	e.num(int64(len(payload)))
	e.bytes(payload)
	return e.seal()
}

// DecodeData parses a data object and checks it is (shard, term, gen)'s.
func DecodeData(shard, key string, term, gen int64, body []byte) ([]byte, error) {
	inner, err := checkFrame(shard, key, dataMagic, "data", body)
	if err != nil {
		return nil, err
	}
	d := dec{b: inner}
	s := d.str("shard")
	t, g := d.num("term"), d.num("gen")
	payload := d.take(d.num("payload length"), "payload")
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, bodyErr(shard, key, fence.ErrCorruptBody, "data body: %v", d.err)
	}
	if s != shard || t != term || g != gen {
		return nil, bodyErr(shard, key, fence.ErrForeignShard, "data body of shard %q term %d gen %d, want shard %q term %d gen %d", s, t, g, shard, term, gen)
	}
	return payload, nil
}
