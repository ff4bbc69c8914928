package testservers

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// S3Proxy stands between an S3 client and a real server and disturbs
// conditional PUTs (those with If-Match or If-None-Match) the way a real
// network and S3 can but no local server does: a 409
// ConditionalRequestConflict answer, or a response lost after the server
// applied the write.
type S3Proxy struct {
	// URL is the proxy's base URL, to use as the store's endpoint.
	URL string

	mu          sync.Mutex
	conflicts   int // next conditional PUTs answered 409 without forwarding
	lose        int // next conditional PUTs forwarded, then the connection cut
	conditional int // conditional PUTs seen
}

// NewS3Proxy starts a proxy in front of target (a base URL); it stops when
// t ends.
func NewS3Proxy(t testing.TB, target string) *S3Proxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatalf("S3 proxy target %q: %v", target, err)
	}
	p := &S3Proxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cond := r.Method == http.MethodPut && (r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "")
		p.mu.Lock()
		conflict, lose := false, false
		if cond {
			p.conditional++
			switch {
			case p.conflicts > 0:
				p.conflicts--
				conflict = true
			case p.lose > 0:
				p.lose--
				lose = true
			}
		}
		p.mu.Unlock()
		switch {
		case conflict:
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code><Message>A conflicting conditional operation is currently in progress against this resource. Please try again.</Message><RequestId>proxy</RequestId></Error>`)
		case lose:
			// Let the server apply the write, then cut the connection
			// before any of its answer reaches the client.
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		default:
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Conflict answers the next n conditional PUTs with 409.
func (p *S3Proxy) Conflict(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conflicts += n
}

// LoseResponse forwards the next n conditional PUTs and drops their answers.
func (p *S3Proxy) LoseResponse(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose += n
}

// Conditional reports how many conditional PUTs reached the proxy.
func (p *S3Proxy) Conditional() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conditional
}
