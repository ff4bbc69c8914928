package client

import (
	"context"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/api/master/v1/masterv1connect"
)

// Leader is the primary master as a master knows it: its --node name, the
// URL it serves on and the term of the operation log it holds. The zero
// Leader means none is known (an election is under way).
type Leader struct {
	Node string
	Addr string
	Term int64
}

// Known reports whether l names a primary.
func (l Leader) Known() bool { return l.Term > 0 }

// Masters finds the primary among the masters of one cluster, given the
// addresses of some of them: every master, standby or fenced, answers
// MasterHAService.Leader with the primary it knows of, and the primary
// answers with itself. Sidecars (serve --master a,b,c), the admin commands
// (--addr a,b,c) and the Router follow the primary through it instead of
// timing out against an address that stopped answering.
type Masters struct {
	addrs []string
	hc    connect.HTTPClient
	opts  []connect.ClientOption

	mu      sync.Mutex
	clients map[string]masterv1connect.MasterHAServiceClient
}

// NewMasters returns a finder over the masters at addrs (base URLs). A nil
// httpClient means http.DefaultClient.
func NewMasters(httpClient connect.HTTPClient, addrs []string, opts ...connect.ClientOption) *Masters {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Masters{addrs: append([]string(nil), addrs...), hc: httpClient, opts: opts, clients: map[string]masterv1connect.MasterHAServiceClient{}}
}

// Addrs returns the configured addresses.
func (m *Masters) Addrs() []string { return append([]string(nil), m.addrs...) }

func (m *Masters) client(addr string) masterv1connect.MasterHAServiceClient {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[addr]
	if c == nil {
		c = masterv1connect.NewMasterHAServiceClient(m.hc, addr, m.opts...)
		m.clients[addr] = c
	}
	return c
}

// Answer is one master's answer to Leader.
type Answer struct {
	Addr string // the address asked
	// Role is the answering master's own; Leader the primary it knows of.
	Role   masterv1.MasterRole
	Node   string
	Leader Leader
	// HA is false for a master without a store (no HA API): it is the
	// only master of its cluster, so it is the primary.
	HA  bool
	Err error
}

// Primary is where requests that need the primary go.
type Primary struct {
	// Addr is the URL to send them to: the address asked, when the master
	// there answered that it is the primary (it may advertise another);
	// else the address the newest leader entry names.
	Addr string
	// Leader is the primary as the masters know it (zero when no master
	// is an HA master).
	Leader Leader
	// Confirmed: the master at Addr answered that it is the primary.
	Confirmed bool
}

// Ask asks every configured master who the primary is, at once, each
// within timeout.
func (m *Masters) Ask(ctx context.Context, timeout time.Duration) []Answer {
	out := make([]Answer, len(m.addrs))
	var wg sync.WaitGroup
	for i, addr := range m.addrs {
		wg.Go(func() {
			out[i] = m.ask(ctx, addr, timeout)
		})
	}
	wg.Wait()
	return out
}

func (m *Masters) ask(ctx context.Context, addr string, timeout time.Duration) Answer {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := m.client(addr).Leader(cctx, connect.NewRequest(&masterv1.LeaderRequest{}))
	a := Answer{Addr: addr}
	switch {
	case connect.CodeOf(err) == connect.CodeUnimplemented:
		// A master without --store has no HA API: the only master of
		// its cluster.
		a.Role = masterv1.MasterRole_MASTER_ROLE_IN_MEMORY
	case err != nil:
		a.Err = err
	default:
		r := res.Msg
		a.HA, a.Role, a.Node = true, r.GetRole(), r.GetNode()
		a.Leader = Leader{Node: r.GetLeaderNode(), Addr: r.GetLeaderAddr(), Term: r.GetLeaderTerm()}
	}
	return a
}

// Find returns the primary: the master that answers it is the primary
// with the highest term (an in-memory master counts as primary), else the
// address the newest leader any master knows of names. ok is false when
// no master knows of a primary (an election is under way, or none
// answers).
func (m *Masters) Find(ctx context.Context, timeout time.Duration) (Primary, []Answer, bool) {
	answers := m.Ask(ctx, timeout)
	p, ok := Choose(answers)
	return p, answers, ok
}

// Choose picks the primary from answers (see Find).
func Choose(answers []Answer) (Primary, bool) {
	var best Primary
	found := false
	for _, a := range answers {
		if a.Err != nil {
			continue
		}
		switch {
		case !a.HA && a.Role == masterv1.MasterRole_MASTER_ROLE_IN_MEMORY:
			if !found || !best.Confirmed {
				best, found = Primary{Addr: a.Addr, Confirmed: true}, true
			}
		case a.Role == masterv1.MasterRole_MASTER_ROLE_PRIMARY && a.Leader.Known():
			if !found || !best.Confirmed || a.Leader.Term > best.Leader.Term {
				best, found = Primary{Addr: a.Addr, Leader: a.Leader, Confirmed: true}, true
			}
		}
	}
	if found {
		return best, true
	}
	for _, a := range answers {
		if a.Err == nil && a.Leader.Known() && a.Leader.Addr != "" && a.Leader.Term > best.Leader.Term {
			best, found = Primary{Addr: a.Leader.Addr, Leader: a.Leader}, true
		}
	}
	return best, found
}
