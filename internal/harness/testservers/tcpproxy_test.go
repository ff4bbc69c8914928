package testservers

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer echoes lines on 127.0.0.1 until t ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	return r.ReadString('\n')
}

// The proxy's three modes on a connection that spans them: pass echoes,
// blackhole holds a message (the connection stays open), pass again
// delivers it, reset closes the connection and refuses new ones until the
// proxy passes again.
func TestTCPProxyModes(t *testing.T) {
	p := NewTCPProxy(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "one", 10*time.Second); err != nil || got != "one\n" {
		t.Fatalf("pass: %q, %v", got, err)
	}

	p.SetMode(ProxyBlackhole)
	if got, err := roundTrip(c, r, "two", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackhole: %q, %v; want a read timeout", got, err)
	}
	// A new connection is accepted, and held too.
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatalf("blackhole refused a connection: %v", err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if got, err := roundTrip(c2, r2, "new", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackhole, new connection: %q, %v; want a read timeout", got, err)
	}

	p.SetMode(ProxyPass)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after the heal, the held message: %q, %v", got, err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("after the heal, the held connection's message: %q, %v", got, err)
	}

	p.SetMode(ProxyReset)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("reset: the connection is still open (%v)", err)
	}
	c3, err := net.Dial("tcp", p.Addr)
	if err == nil {
		_ = c3.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c3.Read(make([]byte, 1))
		c3.Close()
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("reset: a new connection stayed open (%v)", err)
		}
	}

	p.SetMode(ProxyPass)
	c4, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	if got, err := roundTrip(c4, bufio.NewReader(c4), "again", 10*time.Second); err != nil || got != "again\n" {
		t.Fatalf("pass after reset: %q, %v", got, err)
	}
}
