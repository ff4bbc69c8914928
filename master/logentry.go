package master

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
)

// The standby wire format: how one Op travels in the operation log. An
// entry is a frame,
//
//	"SFMOP" | standby wire version (1 byte) | kind (1 byte) | body
//
// where the body is a masterv1.OplogEntry in protobuf. The version is the
// standby wire's own, independent of the complete snapshot's format
// versions (messagepack 1.0.0 and 2.0.0): neither decoder accepts the
// other's data. The kind byte is the OpKind; its values are wire values and
// never change meaning. A reader refuses an unknown version or kind, and a
// body that does not carry what its kind needs, with an *EntryError; it
// never applies part of an entry, and a standby never skips one.
const (
	entryMagic = "SFMOP"
	// StandbyWireVersion is the version of the standby wire format this
	// build writes and reads.
	StandbyWireVersion = 1
	entryHeader        = len(entryMagic) + 2
	// MaxEntryBytes bounds one encoded entry (a key, a tenant and 64
	// replicas fit many times over).
	MaxEntryBytes = 1 << 20
)

// Entry errors, wrapped in an *EntryError. Match them with errors.Is.
var (
	// ErrEntryVersion: the entry is of a standby wire version this build
	// does not read; run a newer master.
	ErrEntryVersion = errors.New("unknown standby wire version")
	// ErrEntryKind: the entry is of a kind this build does not know; run a
	// newer master.
	ErrEntryKind = errors.New("unknown operation log entry kind")
	// ErrEntryMalformed: the bytes are not an entry, or the entry lacks
	// what its kind needs.
	ErrEntryMalformed = errors.New("malformed operation log entry")
)

// EntryError is a refused operation log entry.
type EntryError struct {
	Kind   OpKind // 0 when the frame could not be read
	Err    error  // ErrEntryVersion, ErrEntryKind or ErrEntryMalformed
	Detail string
}

func (e *EntryError) Error() string {
	what := "operation log entry"
	if e.Kind != 0 {
		what += " " + e.Kind.String()
	}
	hint := "the log was written by another program or is damaged; nothing of the entry was applied"
	if errors.Is(e.Err, ErrEntryVersion) || errors.Is(e.Err, ErrEntryKind) {
		hint = "the log was written by a newer master; upgrade this one before it replays the log"
	}
	return fmt.Sprintf("%s: %v: %s (%s)", what, e.Err, e.Detail, hint)
}

func (e *EntryError) Unwrap() error { return e.Err }

// knownKind reports whether this build reads entries of kind k.
func knownKind(k OpKind) bool { return k >= OpMountSegment && k <= OpLeader }

// EncodeEntry returns op in the standby wire format. It refuses an op that
// DecodeEntry would refuse, so the log never holds an entry its readers
// cannot apply.
func EncodeEntry(op *Op) ([]byte, error) {
	e := &masterv1.OplogEntry{Tenant: op.Tenant, Key: op.Key, ClientId: op.Client, Object: op.Object, Segment: op.Segment, Node: op.Node, Shard: op.Shard, Leader: op.Leader}
	if err := checkEntry(op.Kind, e); err != nil {
		return nil, err
	}
	out := make([]byte, entryHeader, entryHeader+proto.Size(e))
	copy(out, entryMagic)
	out[len(entryMagic)] = StandbyWireVersion
	out[len(entryMagic)+1] = byte(op.Kind)
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(out, e)
	if err != nil {
		return nil, &EntryError{Kind: op.Kind, Err: ErrEntryMalformed, Detail: err.Error()}
	}
	if len(out) > MaxEntryBytes {
		return nil, &EntryError{Kind: op.Kind, Err: ErrEntryMalformed, Detail: fmt.Sprintf("%d bytes, more than %d", len(out), MaxEntryBytes)}
	}
	return out, nil
}

// DecodeEntry parses one entry of the standby wire format. Errors are
// *EntryError.
func DecodeEntry(b []byte) (*Op, error) {
	bad := func(k OpKind, err error, format string, args ...any) (*Op, error) {
		return nil, &EntryError{Kind: k, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	if len(b) < entryHeader || string(b[:len(entryMagic)]) != entryMagic {
		return bad(0, ErrEntryMalformed, "not a standby wire frame (%d bytes)", len(b))
	}
	if len(b) > MaxEntryBytes {
		return bad(0, ErrEntryMalformed, "%d bytes, more than %d", len(b), MaxEntryBytes)
	}
	if v := b[len(entryMagic)]; v != StandbyWireVersion {
		return bad(0, ErrEntryVersion, "version %d, this build reads %d", v, StandbyWireVersion)
	}
	k := OpKind(b[len(entryMagic)+1])
	if !knownKind(k) {
		return bad(0, ErrEntryKind, "kind %d", uint8(k))
	}
	var e masterv1.OplogEntry
	if err := proto.Unmarshal(b[entryHeader:], &e); err != nil {
		return bad(k, ErrEntryMalformed, "body: %v", err)
	}
	if err := checkEntry(k, &e); err != nil {
		return nil, err
	}
	return &Op{Kind: k, Tenant: e.GetTenant(), Key: e.GetKey(), Client: e.GetClientId(), Object: e.GetObject(), Segment: e.GetSegment(), Node: e.GetNode(), Shard: e.GetShard(), Leader: e.GetLeader()}, nil
}

// checkEntry refuses an entry that lacks what its kind needs or carries
// what it must not, so replay never meets a half-described change. The
// checks common to every kind come first, then the kind's own
// (entryChecks).
func checkEntry(k OpKind, e *masterv1.OplogEntry) error {
	if !knownKind(k) {
		return &EntryError{Err: ErrEntryKind, Detail: fmt.Sprintf("kind %d", uint8(k))}
	}
	detail := commonEntryCheck(k, e)
	if detail == "" {
		detail = entryChecks[k](e)
	}
	if detail != "" {
		return &EntryError{Kind: k, Err: ErrEntryMalformed, Detail: detail}
	}
	return nil
}

// commonEntryCheck is what every kind of entry must satisfy: bounded
// names, and no field that belongs to another kind. It returns what is
// wrong, "" for nothing.
func commonEntryCheck(k OpKind, e *masterv1.OplogEntry) string {
	switch {
	case len(e.GetTenant()) > maxKeyLen || len(e.GetKey()) > maxKeyLen:
		return fmt.Sprintf("tenant or key longer than %d bytes", maxKeyLen)
	case k != OpNode && e.GetNode() != nil:
		return fmt.Sprintf("a %v entry carries a node", k)
	case k != OpAssignShard && e.GetShard() != nil:
		return fmt.Sprintf("a %v entry carries a shard assignment", k)
	case k != OpLeader && e.GetLeader() != nil:
		return fmt.Sprintf("a %v entry carries a leader record", k)
	}
	return ""
}

// entryChecks are each kind's own checks; each returns what is wrong, ""
// for nothing.
var entryChecks = [...]func(e *masterv1.OplogEntry) string{
	OpMountSegment:   checkSegmentEntry,
	OpUnmountSegment: checkSegmentEntry,
	OpRemountSegment: checkSegmentEntry,
	OpPutStart:       checkObjectEntry,
	OpPutEnd:         checkObjectEntry,
	OpPutRevoke:      checkRemovalEntry,
	OpRemove:         checkRemovalEntry,
	OpEvict:          checkObjectEntry,
	OpRestoreSegment: checkSegmentEntry,
	OpRestoreObject:  checkObjectEntry,
	OpNode:           checkNodeEntry,
	OpAssignShard:    checkShardEntry,
	OpLeader:         checkLeaderEntry,
}

func checkLeaderEntry(e *masterv1.OplogEntry) string {
	l := e.GetLeader()
	switch {
	case l == nil:
		return "no leader record"
	case e.GetObject() != nil || e.GetSegment() != nil || e.GetKey() != "" || e.GetTenant() != "" || e.GetClientId() != "":
		return "a leader entry names an object, a segment or a client"
	case len(l.GetNode()) > maxLeaderField || len(l.GetAddr()) > maxLeaderField:
		return fmt.Sprintf("leader node or address longer than %d bytes", maxLeaderField)
	case !printable(l.GetNode()) || !printable(l.GetAddr()):
		return "leader node or address holds a control character"
	}
	return ""
}

func checkNodeEntry(e *masterv1.OplogEntry) string {
	n := e.GetNode()
	switch {
	case n == nil:
		return "no node"
	case e.GetObject() != nil || e.GetSegment() != nil || e.GetKey() != "":
		return "a node entry names an object or a segment"
	}
	if err := ValidateNodeName(n.GetName()); err != nil {
		return err.Error()
	}
	return ""
}

func checkShardEntry(e *masterv1.OplogEntry) string {
	a := e.GetShard()
	switch {
	case a == nil:
		return "no shard assignment"
	case e.GetObject() != nil || e.GetSegment() != nil || e.GetKey() != "":
		return "a shard entry names an object or a segment"
	case !a.GetRemoved() && (a.GetTerm() < 1 || a.GetAllocation() == ""):
		return fmt.Sprintf("shard %.64q assigned without a term and an allocation", a.GetShard())
	}
	if err := ValidateShardName(a.GetShard()); err != nil {
		return err.Error()
	}
	if a.GetNode() != "" {
		if err := ValidateNodeName(a.GetNode()); err != nil {
			return err.Error()
		}
	}
	return ""
}

func checkSegmentEntry(e *masterv1.OplogEntry) string {
	s := e.GetSegment()
	switch {
	case s == nil:
		return "no segment"
	case s.GetId() == 0 || s.GetSize() == 0 || s.GetClientId() == "":
		return "segment needs an id, a size and a client"
	case s.GetBase()+s.GetSize() < s.GetBase():
		return fmt.Sprintf("segment %d base+size overflows", s.GetId())
	case e.GetObject() != nil || e.GetKey() != "":
		return "a segment entry names an object"
	}
	return ""
}

func checkRemovalEntry(e *masterv1.OplogEntry) string {
	switch {
	case e.GetKey() == "":
		return "no key"
	case e.GetObject() != nil || e.GetSegment() != nil:
		return "a removal carries an object or a segment"
	}
	return ""
}

func checkObjectEntry(e *masterv1.OplogEntry) string {
	o := e.GetObject()
	switch {
	case o == nil:
		return "no object"
	case e.GetSegment() != nil:
		return "an object entry carries a segment"
	case o.GetKey() == "" || o.GetTenant() != e.GetTenant() || o.GetKey() != e.GetKey():
		return fmt.Sprintf("object (%.64q, %.64q) under entry (%.64q, %.64q)", o.GetTenant(), o.GetKey(), e.GetTenant(), e.GetKey())
	case o.GetClientId() == "":
		return "object without a client"
	case len(o.GetReplicas()) > maxReplicas:
		return fmt.Sprintf("%d replicas, at most %d", len(o.GetReplicas()), maxReplicas)
	}
	for _, r := range o.GetReplicas() {
		switch {
		case r.GetKind() != masterv1.ReplicaKind_REPLICA_KIND_MEMORY && r.GetKind() != masterv1.ReplicaKind_REPLICA_KIND_DISK:
			return fmt.Sprintf("replica %d of kind %d", r.GetId(), r.GetKind())
		case r.GetKind() == masterv1.ReplicaKind_REPLICA_KIND_MEMORY && (r.GetSegmentId() == 0 || r.GetSize() == 0 || r.GetOffset()+r.GetSize() < r.GetOffset()):
			return fmt.Sprintf("memory replica %d needs a segment and a non-empty range", r.GetId())
		case r.GetStatus() < masterv1.ReplicaStatus_REPLICA_STATUS_PROCESSING || r.GetStatus() > masterv1.ReplicaStatus_REPLICA_STATUS_FAILED:
			return fmt.Sprintf("replica %d of status %d", r.GetId(), r.GetStatus())
		}
	}
	return ""
}

// maxLeaderField bounds a leader entry's node name and address.
const maxLeaderField = 1024

// printable reports whether s holds no ASCII control character.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// maxReplicas bounds the replicas of one object (PutStart allows 64 memory
// replicas; disk copies come on top).
const maxReplicas = 256
