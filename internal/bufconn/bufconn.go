// Package bufconn buffers the reads of the connections a server accepts.
//
// net/http's HTTP/2 server reads its frames straight from the connection:
// two system calls per frame (the 9-byte header, then the payload), so a
// stream of small messages costs two reads each. Behind a read buffer one
// read takes every frame that has arrived.
package bufconn

import (
	"bufio"
	"errors"
	"net"
)

// Size is the read buffer of each connection: two HTTP/2 frames of the
// default maximum size.
const Size = 32 << 10

// Listen returns ln with the reads of every connection it accepts
// buffered.
func Listen(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, r: bufio.NewReaderSize(c, Size)}, nil
}

// conn is a connection whose reads go through a buffer; everything else
// is the connection's own.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func (c *conn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes a TCP or unix connection (net/http's graceful
// close of an HTTP/1 connection uses it when the connection has it).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
