package translog

import (
	"fmt"
	"time"

	"github.com/shardfence/shardfence/fence"
)

// MDVerdict settles an md create that found the key taken (or whose
// response was lost).
type MDVerdict struct {
	Action    fence.Action // Adopt: it is ours; Fenced: it is not
	Successor int64        // for a poison: the term that sealed the lineage
	Reason    string
}

// SettleMDCreate decides whether the md found at our key is the one we
// tried to create. A poison means a successor cut the lineage here: we are
// fenced even if our fence CAS for this generation succeeded. Anything else
// that is not byte-for-byte our record (another allocation, other ops) is
// another writer's generation: fenced too.
func SettleMDCreate(found, ours MD) MDVerdict {
	switch {
	case found.Kind == KindPoison:
		return MDVerdict{Action: fence.Fenced, Successor: found.SealedBy,
			Reason: fmt.Sprintf("generation %d of term %d was poisoned by successor term %d", found.Gen, found.Term, found.SealedBy)}
	case found.Kind == KindSync && found.Allocation == ours.Allocation && found.Term == ours.Term && found.Gen == ours.Gen &&
		found.PrevGen == ours.PrevGen && found.FirstSeqNo == ours.FirstSeqNo && found.OpCount == ours.OpCount &&
		found.PayloadLen == ours.PayloadLen && found.Checksum == ours.Checksum && found.Inline == ours.Inline:
		return MDVerdict{Action: fence.Adopt}
	default:
		return MDVerdict{Action: fence.Fenced,
			Reason: fmt.Sprintf("generation %d of term %d was written by allocation %q with other content", found.Gen, found.Term, found.Allocation)}
	}
}

// LeaseState is the lease-mode clock arithmetic (protocol section 3): a sync may
// be acknowledged without a CAS only while now < last successful CAS's send
// time + interval. The send time, not the response time, starts the lease:
// the successor's wait starts at its delete, which the CAS preceded.
type LeaseState struct {
	Interval time.Duration
	SentAt   int64 // steady ns at which the last successful CAS was sent
	Valid    bool  // a CAS has succeeded at least once
}

// Covers reports whether an ack at steady time now needs no CAS.
func (l LeaseState) Covers(now int64) bool {
	return l.Valid && now < l.SentAt+int64(l.Interval)
}
