package testservers

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// ProxyMode is what a TCPProxy does with the traffic between its clients
// and its target.
type ProxyMode int

const (
	// ProxyPass forwards both ways.
	ProxyPass ProxyMode = iota
	// ProxyBlackhole accepts connections and holds them, open, forwarding
	// nothing either way: what a client sends waits (in the proxy and the
	// kernel's buffers), as packets a partition drops wait for TCP to send
	// them again. Switched back to ProxyPass, the held connections resume
	// where they stopped, as after a healed partition; a request sent
	// during the cut reaches the target then.
	ProxyBlackhole
	// ProxyReset closes every connection and each new one at once.
	ProxyReset
)

func (m ProxyMode) String() string {
	switch m {
	case ProxyPass:
		return "pass"
	case ProxyBlackhole:
		return "blackhole"
	case ProxyReset:
		return "reset"
	}
	return "unknown"
}

// TCPProxy is an in-process TCP proxy on 127.0.0.1 in front of a server,
// whose network a test cuts and heals with SetMode.
type TCPProxy struct {
	// Addr is the proxy's address, 127.0.0.1:PORT.
	Addr   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	cond   *sync.Cond
	mode   ProxyMode
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewTCPProxy starts a proxy in front of target (host:port) in ProxyPass
// mode; it stops, closing every connection, when t ends.
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("TCP proxy: %v", err)
	}
	p := &TCPProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Mode is the proxy's mode.
func (p *TCPProxy) Mode() ProxyMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches the proxy to m. ProxyReset closes every connection
// now; leaving ProxyBlackhole lets the held connections go on (or, for
// ProxyReset, closes them).
func (p *TCPProxy) SetMode(m ProxyMode) {
	p.mu.Lock()
	p.mode = m
	var cut []net.Conn
	if m == ProxyReset {
		for c := range p.conns {
			cut = append(cut, c)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range cut {
		reset(c)
	}
}

// Close stops the proxy and closes every connection.
func (p *TCPProxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// reset closes c with an RST rather than a FIN where it can.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// track adds c to the connections SetMode and Close reach; false if the
// proxy is closed or resetting (c is closed then).
func (p *TCPProxy) track(c net.Conn) bool {
	p.mu.Lock()
	ok := !p.closed && p.mode != ProxyReset
	if ok {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	if !ok {
		reset(c)
	}
	return ok
}

func (p *TCPProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// gate waits while the proxy holds traffic (ProxyBlackhole); false once
// the connection is to be dropped (ProxyReset, or the proxy closed).
func (p *TCPProxy) gate() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.mode == ProxyBlackhole && !p.closed {
		p.cond.Wait()
	}
	return p.mode == ProxyPass && !p.closed
}

func (p *TCPProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// serve forwards one client connection: it dials the target only once the
// gate opens, as a SYN a partition drops is sent again until it passes.
func (p *TCPProxy) serve(c net.Conn) {
	defer p.untrack(c)
	if !p.gate() {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		reset(c)
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(up, c) })
	wg.Go(func() { p.pipe(c, up) })
	wg.Wait()
}

// pipe copies src to dst, each chunk waiting at the gate. At src's EOF it
// half-closes dst and leaves the other direction to finish; on an error,
// or when the gate drops the connection, it closes both.
func (p *TCPProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		if !p.gate() {
			reset(src)
			reset(dst)
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			// Read during a cut: held here until it heals.
			if !p.gate() {
				reset(src)
				reset(dst)
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
				return
			}
			_ = dst.Close()
			_ = src.Close()
			return
		}
	}
}
