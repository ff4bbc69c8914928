package bufconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
)

// fakeConn serves its reads from data, counting them.
type fakeConn struct {
	net.Conn
	data   *bytes.Reader
	reads  int
	halfUp bool
}

func (c *fakeConn) Read(p []byte) (int, error) {
	c.reads++
	return c.data.Read(p)
}

func (c *fakeConn) CloseWrite() error {
	c.halfUp = true
	return nil
}

type fakeListener struct {
	net.Listener
	c net.Conn
}

func (l fakeListener) Accept() (net.Conn, error) { return l.c, nil }

// Frames that arrived together are read with one read of the connection,
// not two per frame (header, payload), and come out whole and in order.
func TestFramesThatArrivedTogetherTakeOneRead(t *testing.T) {
	const frames = 10
	var wire bytes.Buffer
	for i := range frames {
		hdr := make([]byte, 9)
		hdr[2] = 100 // payload length
		hdr[8] = byte(i)
		wire.Write(hdr)
		wire.Write(bytes.Repeat([]byte{byte(i)}, 100))
	}
	fc := &fakeConn{data: bytes.NewReader(wire.Bytes())}
	c, err := Listen(fakeListener{c: fc}).Accept()
	if err != nil {
		t.Fatal(err)
	}
	for i := range frames {
		hdr := make([]byte, 9)
		if _, err := io.ReadFull(c, hdr); err != nil {
			t.Fatal(err)
		}
		payload := make([]byte, int(hdr[2]))
		if _, err := io.ReadFull(c, payload); err != nil {
			t.Fatal(err)
		}
		if hdr[8] != byte(i) || !bytes.Equal(payload, bytes.Repeat([]byte{byte(i)}, 100)) {
			t.Fatalf("frame %d came out as frame %d", i, hdr[8])
		}
	}
	if fc.reads != 1 {
		t.Errorf("%d frames took %d reads of the connection, want 1", frames, fc.reads)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("read past the end: %v, want EOF", err)
	}
}

// The connection keeps its half-close, which net/http uses to close an
// HTTP/1 connection gracefully.
func TestCloseWriteReachesTheConnection(t *testing.T) {
	fc := &fakeConn{data: bytes.NewReader(nil)}
	c, _ := Listen(fakeListener{c: fc}).Accept()
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("the buffered connection has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil || !fc.halfUp {
		t.Errorf("CloseWrite: %v, reached the connection: %v", err, fc.halfUp)
	}
}
