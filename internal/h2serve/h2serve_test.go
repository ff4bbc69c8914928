package h2serve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServesHTTP1AndH2C: one plain listener answers an HTTP/1.1 client and
// an HTTP/2 client with prior knowledge (what a gRPC client does without
// TLS), and Shutdown ends Serve with no error of its own; with and
// without buffered reads.
func TestServesHTTP1AndH2C(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unbuffered", true: "buffered"}[buffered], func(t *testing.T) {
			testServes(t, buffered)
		})
	}
}

func testServes(t *testing.T, buffered bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			_, _ = w.Write([]byte(r.Proto + " " + string(body)))
		}),
		IdleTimeout: time.Minute,
		BufferReads: buffered,
	})
	errc := s.Start(ln)
	url := "http://" + ln.Addr().String() + "/"
	for _, tc := range []struct {
		name  string
		proto func(*http.Protocols)
		want  string
	}{
		{"http1", func(p *http.Protocols) { p.SetHTTP1(true) }, "HTTP/1.1 ping"},
		{"h2c", func(p *http.Protocols) { p.SetUnencryptedHTTP2(true) }, "HTTP/2.0 ping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{Protocols: new(http.Protocols)}
			tc.proto(tr.Protocols)
			defer tr.CloseIdleConnections()
			res, err := (&http.Client{Transport: tr}).Post(url, "text/plain", strings.NewReader("ping"))
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			got, _ := io.ReadAll(res.Body)
			if string(got) != tc.want {
				t.Fatalf("answer %q, want %q", got, tc.want)
			}
		})
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}
