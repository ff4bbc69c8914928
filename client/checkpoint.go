package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

// ReadCheckpointFile calls fn with the bytes of file in the checkpoint a
// warm Open of the shard serves (Opened.Checkpoint lists the files), from
// offset, length bytes (0: to the end), in order. A connection that breaks
// is read again from after the last chunk fn got, so fn sees every byte
// once. Errors are *Error: out_of_range, no_such_file, corrupt, not_warm
// (Reason).
func (c *Client) ReadCheckpointFile(ctx context.Context, shard, file string, offset, length int64, fn func(off int64, data []byte) error) error {
	next, end := offset, int64(-1)
	if length > 0 {
		end = offset + length
	}
	for attempt := 0; ; attempt++ {
		left := int64(0)
		if end >= 0 {
			left = end - next
		}
		st, err := c.conn.svc.ReadCheckpointFile(ctx, connect.NewRequest(&sidecarv1.ReadCheckpointFileRequest{Shard: shard, File: file, Offset: next, Length: left}))
		if err == nil {
			for st.Receive() {
				m := st.Msg()
				if m.GetOffset() != next {
					st.Close()
					return &Error{Op: "ReadCheckpointFile", Shard: shard, Code: connect.CodeInternal,
						Err: fmt.Errorf("chunk at offset %d, expected %d", m.GetOffset(), next)}
				}
				if len(m.GetData()) > 0 || next == offset {
					if err := fn(next, m.GetData()); err != nil {
						st.Close()
						return err
					}
				}
				next += int64(len(m.GetData()))
			}
			err = st.Err()
			st.Close()
			if err == nil {
				return nil
			}
		}
		if attempt >= readRetries || ctx.Err() != nil || !transportFailure(err) || (end >= 0 && next >= end) {
			return apiError("ReadCheckpointFile", shard, err)
		}
		select {
		case <-time.After(retryDelay(attempt)):
		case <-ctx.Done():
			return apiError("ReadCheckpointFile", shard, ctx.Err())
		}
	}
}

// CheckpointFile is one file of the checkpoint a warm Open serves, as an
// io.ReaderAt (and io.ReadSeeker through io.NewSectionReader(f, 0,
// f.Size())): a primary opens its engine over it while the sidecar still
// hydrates. Every byte it returns belongs to a block the sidecar checked.
// It is safe for concurrent use.
type CheckpointFile struct {
	c     *Client
	ctx   context.Context
	shard string
	name  string
	size  int64
}

// CheckpointFile returns the reader of the manifest file info of the
// shard's warm open; ctx bounds every read made through it.
func (c *Client) CheckpointFile(ctx context.Context, shard string, info *sidecarv1.CheckpointFileInfo) *CheckpointFile {
	return &CheckpointFile{c: c, ctx: ctx, shard: shard, name: info.GetName(), size: info.GetSize()}
}

// CheckpointFiles returns a reader of every file of m, by name.
func (c *Client) CheckpointFiles(ctx context.Context, shard string, m *sidecarv1.CheckpointManifest) map[string]*CheckpointFile {
	out := make(map[string]*CheckpointFile, len(m.GetFiles()))
	for _, f := range m.GetFiles() {
		out[f.GetName()] = c.CheckpointFile(ctx, shard, f)
	}
	return out
}

// Name is the file's name in the checkpoint.
func (f *CheckpointFile) Name() string { return f.name }

// Size is the file's size, from the manifest.
func (f *CheckpointFile) Size() int64 { return f.size }

// ReadAt reads len(p) bytes from off, as io.ReaderAt: fewer only at the
// end of the file (then io.EOF), or on an error.
func (f *CheckpointFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("shardfence client: negative offset")
	}
	if off >= f.size {
		if len(p) == 0 && off == f.size {
			return 0, nil
		}
		return 0, io.EOF
	}
	want := min(int64(len(p)), f.size-off)
	if want == 0 {
		return 0, nil
	}
	n := 0
	err := f.c.ReadCheckpointFile(f.ctx, f.shard, f.name, off, want, func(_ int64, data []byte) error {
		n += copy(p[n:], data)
		return nil
	})
	if err != nil {
		return n, err
	}
	if int64(n) != want {
		return n, io.ErrUnexpectedEOF
	}
	if want < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

// PublishCheckpoint publishes files as the checkpoint of the shard's state
// up to generation gen (a generation this term acknowledged, or its
// restore point): the sidecar stores them and creates the manifest last,
// only while no higher term holds the shard. The files travel in one
// request, so together they must fit the sidecar's --max-request-bytes. It
// returns the checkpoint's manifest key.
func (c *Client) PublishCheckpoint(ctx context.Context, shard string, gen int64, files map[string][]byte) (string, error) {
	req := &sidecarv1.PublishCheckpointRequest{Shard: shard, Gen: gen}
	for name, data := range files {
		req.Files = append(req.Files, &sidecarv1.CheckpointFile{Name: name, Data: data, Last: true})
	}
	res, err := c.conn.svc.PublishCheckpoint(ctx, connect.NewRequest(req))
	if err != nil {
		return "", apiError("PublishCheckpoint", shard, err)
	}
	return res.Msg.GetKey(), nil
}
