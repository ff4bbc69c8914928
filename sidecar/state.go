package sidecar

// ShardState is where a shard is in its life on this sidecar. A shard in
// the registry holds one of the lifecycle states (opening, open,
// handing_off, handed_off, closing); Status reports an open shard whose
// writer a successor fenced as fenced, one whose writer failed otherwise
// as failed, and Close reports closed. The API carries String().
//
// A warm-opened shard is ShardOpen from the start and carries a second
// lifecycle state of its own, its Locality (partial, then full): the
// master, the agent and Watch keep keying on "open", while the locality
// says where ReadCheckpointFile reads from.
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

// Locality is where a warm-opened shard's checkpoint files are: partial
// (served on demand from the block cache and the store while the
// background hydration copies them) until every file is local and
// verified against the manifest, then full. It only moves forward. A
// shard opened without warm has none: Open streamed its files.
type Locality int

const (
	// LocalityNone: the shard was not opened warm.
	LocalityNone Locality = iota
	// LocalityPartial: some checkpoint files are read from the store.
	LocalityPartial
	// LocalityFull: every checkpoint file is local and verified.
	LocalityFull
)

// String is the locality's name in the API and the metrics ("" for none).
func (l Locality) String() string {
	switch l {
	case LocalityPartial:
		return "partial"
	case LocalityFull:
		return "full"
	}
	return ""
}
