package fence

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/layout"
)

// Record is the content of a fence key. No body is ever written twice:
// stores whose token is a hash of the body (S3 ETags) would otherwise hand
// out the same token again (ABA) and revive stale CAS expectations. Every
// CAS of the key (sync, transfer, revert) takes a strictly higher Seq; the
// creates of a claim all carry Seq 0, so each attempt carries its own
// Nonce instead. A create whose response was lost can land after a
// successor deleted the key; with its own nonce the resurrected key has a
// token no writer holds, so no stale CAS expectation matches it.
type Record struct {
	Shard      string
	Term       int64
	Allocation string // the owner: the allocation allowed to acknowledge
	Node       string // where the owner runs, for operators; may be empty
	Seq        int64  // number of writes before this one
	Gen        int64  // the last generation committed; 0 when none
	// Nonce is unique to the claim attempt that created the key; later
	// writes carry it unchanged. Empty only in records built by hand.
	Nonce string
}

const (
	bodyTag     = "shardfence.fence"
	bodyVersion = "v1"
	bodyFields  = 9
	// MaxIDLen bounds shard, allocation and node identifiers.
	MaxIDLen = ident.MaxLen
	// MaxNonceLen bounds a claim attempt's nonce.
	MaxNonceLen = 64
)

// ValidateID checks an identifier stored in a body: non-empty unless
// optional, at most MaxIDLen bytes, valid UTF-8, no '|' separator, no
// control characters.
func ValidateID(what, s string, optional bool) error { return ident.Validate(what, s, optional) }

func (r Record) validate() error {
	if err := ValidateID("shard", r.Shard, false); err != nil {
		return err
	}
	if err := ValidateID("allocation", r.Allocation, false); err != nil {
		return err
	}
	if err := ValidateID("node", r.Node, true); err != nil {
		return err
	}
	if r.Term < 1 {
		return fmt.Errorf("%w: term %d (terms start at 1)", ErrInvalidArgument, r.Term)
	}
	if err := ValidateID("nonce", r.Nonce, true); err != nil {
		return err
	}
	if len(r.Nonce) > MaxNonceLen {
		return fmt.Errorf("%w: nonce is %d bytes, more than %d", ErrInvalidArgument, len(r.Nonce), MaxNonceLen)
	}
	if r.Seq < 0 || r.Gen < 0 {
		return fmt.Errorf("%w: negative seq %d or gen %d", ErrInvalidArgument, r.Seq, r.Gen)
	}
	return nil
}

// Encode returns the body: "shardfence.fence|v1|shard|term|allocation|node|seq|gen|nonce".
// Text, so an operator can read a fence key with any store client.
func (r Record) Encode() ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	return r.encode(), nil
}

func (r Record) encode() []byte {
	return []byte(strings.Join([]string{bodyTag, bodyVersion, r.Shard,
		strconv.FormatInt(r.Term, 10), r.Allocation, r.Node,
		strconv.FormatInt(r.Seq, 10), strconv.FormatInt(r.Gen, 10), r.Nonce}, "|"))
}

// DecodeRecord parses the body stored at key and checks that it belongs to
// shard and to the term the key names. Any mismatch is a *BodyError, never a
// fencing verdict.
func DecodeRecord(shard, key string, body []byte) (Record, error) {
	bad := func(err error, format string, args ...any) (Record, error) {
		return Record{}, &BodyError{Shard: shard, Key: key, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	f := strings.Split(string(body), "|")
	if len(f) < 2 || f[0] != bodyTag {
		return bad(ErrCorruptBody, "not a fence body (%d bytes)", len(body))
	}
	if f[1] != bodyVersion {
		return bad(ErrUnknownVersion, "fence body version %q, this build reads %s", trunc(f[1]), bodyVersion)
	}
	if len(f) != bodyFields {
		return bad(ErrCorruptBody, "fence body has %d fields, want %d", len(f), bodyFields)
	}
	var r Record
	r.Shard, r.Allocation, r.Node, r.Nonce = f[2], f[4], f[5], f[8]
	nums := []*int64{&r.Term, &r.Seq, &r.Gen}
	for i, s := range []string{f[3], f[6], f[7]} {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return bad(ErrCorruptBody, "field %q is not a number", trunc(s))
		}
		*nums[i] = v
	}
	if err := r.validate(); err != nil {
		return bad(ErrCorruptBody, "%v", err)
	}
	// Only the canonical spelling is accepted, so equal records always mean
	// equal bytes (settling a lost response compares records).
	if string(r.encode()) != string(body) {
		return bad(ErrCorruptBody, "fence body is not in canonical form")
	}
	if r.Shard != shard {
		return bad(ErrForeignShard, "fence body names shard %q", r.Shard)
	}
	if t, ok := layout.ParseFenceKey(key); ok && t != r.Term {
		return bad(ErrForeignShard, "fence body names term %d under the key of term %d", r.Term, t)
	}
	return r, nil
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
