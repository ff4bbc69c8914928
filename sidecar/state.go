package sidecar

// ShardState is where a shard is in its life on this sidecar. A shard in
// the registry holds one of the lifecycle states (opening, open,
// handing_off, handed_off, closing); Status reports an open shard whose
// writer a successor fenced as fenced, one whose writer failed otherwise
// as failed, and Close reports closed. The API carries String().
//
// A new state goes here with its predicates: a shard serving appends
// while its checkpoint still hydrates (partial, then full) would accept
// appends like ShardOpen and say what Read may serve.
type ShardState int

const (
	// ShardOpening: an Open or AdoptHandoff is claiming, sealing,
	// restoring or adopting; nothing else may touch the shard.
	ShardOpening ShardState = iota + 1
	// ShardOpen: the shard takes appends.
	ShardOpen
	// ShardFenced: a successor (or the handoff's target, writing) fenced
	// the writer; nothing more is acknowledged here for this term.
	ShardFenced
	// ShardFailed: the writer ended on an error that is not fencing.
	ShardFailed
	// ShardHandingOff: StartHandoff is draining the writer and
	// transferring the fence key; appends are refused, not acknowledged.
	ShardHandingOff
	// ShardHandedOff: the fence key names the relocation target; an
	// AbortHandoff may still take it back.
	ShardHandedOff
	// ShardClosing: Close is draining the writer.
	ShardClosing
	// ShardClosed: Close released the shard (reported by Close only).
	ShardClosed
)

var stateNames = map[ShardState]string{
	ShardOpening: "opening", ShardOpen: "open", ShardFenced: "fenced", ShardFailed: "failed",
	ShardHandingOff: "handing_off", ShardHandedOff: "handed_off", ShardClosing: "closing", ShardClosed: "closed",
}

// String is the state's name in the API, /readyz and the metrics.
func (s ShardState) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return "unknown"
}

// MarshalText writes the state by name (JSON of /readyz).
func (s ShardState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// inTransition: an Open, AdoptHandoff or Close is in progress; other
// calls on the shard get ErrShardBusy.
func (s ShardState) inTransition() bool { return s == ShardOpening || s == ShardClosing }

// movedAway: a handoff took, or is taking, the shard's appends to its
// target.
func (s ShardState) movedAway() bool { return s == ShardHandingOff || s == ShardHandedOff }

// yieldsToAdopt: this sidecar's own term no longer writes, so an
// AdoptHandoff may take the shard's slot.
func (s ShardState) yieldsToAdopt() bool { return s == ShardHandedOff || s == ShardFenced }
