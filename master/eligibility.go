package master

// ServingEligibility is the one decision, for every path that would route
// new work to a client-owned resource, whether the resource may take it:
//
//	CanServe     = the resource is intrinsically valid
//	               && its own lifecycle permits serving
//	               && its owning ClientLivenessRecord is Active
//	ShouldRetain = its owning ClientLivenessRecord is Active or Suspected
//
// Every path of this master that hands out a resource asks it: placement
// of new replicas (PutStart), read descriptors (GetReplicaList and the
// group reads), placement of shards on sidecar nodes (assignment,
// takeover, drain targets) and the drain's choice of where shards go. It
// supplements the resources' own checks (a segment awaiting remount has
// no endpoint; a draining node takes no shard) rather than replacing them.
// Callbacks of work already started (PutEnd, PutRevoke, a sidecar's report
// on a shard it holds) do not ask it: they let state converge.
type ServingEligibility interface {
	CanServe(r Resource) bool
	ShouldRetain(r Resource) bool
}

// Resource is what eligibility judges: a memory segment or a sidecar node.
type Resource interface {
	// Owner is the client incarnation that created the resource (nil when
	// none is known: nothing may be routed to it).
	Owner() *ClientLivenessRecord
	// Serviceable reports the resource's own checks: intrinsically valid,
	// and its lifecycle permits serving (a segment mounted, or remounted
	// after a failover, with an endpoint; a node registered, not
	// draining, on a store that enforces preconditions).
	Serviceable() bool
}

// LivenessEligibility is the production ServingEligibility: the rules
// above over the owner's liveness record.
type LivenessEligibility struct{}

// CanServe implements ServingEligibility.
func (LivenessEligibility) CanServe(r Resource) bool {
	return r.Serviceable() && r.Owner().State() == ClientActive
}

// ShouldRetain implements ServingEligibility.
func (LivenessEligibility) ShouldRetain(r Resource) bool {
	s := r.Owner().State()
	return s == ClientActive || s == ClientSuspected
}

// Owner implements Resource: the incarnation that mounted (or remounted)
// the segment.
func (s *segment) Owner() *ClientLivenessRecord { return s.owner.Load() }

// Serviceable implements Resource: a segment serves once it is mounted or
// remounted with an endpoint; one restored from before a failover has
// none until its client remounts it. The check is one atomic load, so the
// read path can afford it.
func (s *segment) Serviceable() bool { return s.size > 0 && s.endpoint.Load() != nil }
