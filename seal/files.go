package seal

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// A FileSink receives the verified files of a checkpoint Hydrate
// downloads (HydrateOptions.Into). Calls may come from several goroutines.
type FileSink interface {
	// WriteFile stores the checkpoint file name (a slash-separated
	// relative path) and returns where it put it: what Hydrated.Paths and
	// HydrateOptions.Accept report.
	WriteFile(name string, body []byte) (string, error)
	// Remove drops a file stored earlier, because its checkpoint was
	// refused.
	Remove(name string) error
}

// A StreamSink is a FileSink that takes a file as a stream: Hydrate then
// writes each file as it arrives (on a store with streaming reads) instead
// of holding it whole, so memory does not grow with the files' size.
type StreamSink interface {
	FileSink
	// WriteFrom stores the file name from r and returns where it put it
	// (also when it fails after creating it, so the caller can remove
	// it). An error reading r is returned as it is.
	WriteFrom(name string, r io.Reader) (string, error)
}

// A ChunkSink is a StreamSink that also takes a file in pieces written at
// their offsets: Hydrate then reads a large file with several range GETs
// at once (HydrateOptions.ChunkSize).
type ChunkSink interface {
	StreamSink
	// CreateSized creates the file name (emptying what it held) at size
	// bytes and returns it open for WriteAt from several goroutines, and
	// where it put it (also when it fails after creating it, so the
	// caller can remove it). The caller closes the file.
	CreateSized(name string, size int64) (SizedFile, string, error)
}

// SizedFile is a file a ChunkSink created: its pieces are written at their
// offsets, concurrently.
type SizedFile interface {
	io.WriterAt
	Close() error
}

// dirSink writes a checkpoint's files under a local directory: Hydrate's
// sink when HydrateOptions.Into is nil.
type dirSink string

func (d dirSink) WriteFile(name string, body []byte) (string, error) {
	p := filepath.Join(string(d), filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return p, os.WriteFile(p, body, 0o644)
}

// WriteFrom streams the file to disk. A failed copy leaves a partial file
// the caller removes (a retry rewrites it from the start).
func (d dirSink) WriteFrom(name string, r io.Reader) (string, error) {
	p := filepath.Join(string(d), filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	// 1 MiB writes: a copy per Read costs a system call per few KiB of a
	// network stream.
	_, err = writeFull(r, f, math.MaxInt64)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return p, err
}

// CreateSized creates the file at its final size (a hole until the pieces
// land), so pieces can be written at their offsets in any order.
func (d dirSink) CreateSized(name string, size int64) (SizedFile, string, error) {
	p := filepath.Join(string(d), filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, "", err
	}
	f, err := os.Create(p)
	if err != nil {
		return nil, "", err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, p, err
	}
	return f, p, nil
}

func (d dirSink) Remove(name string) error {
	return os.Remove(filepath.Join(string(d), filepath.FromSlash(name)))
}

// localFiles is the fs.FS of files PublishCheckpoint names by local path.
type localFiles map[string]string

func (l localFiles) Open(name string) (fs.File, error) {
	p, ok := l[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return os.Open(p)
}

// MemFiles is a checkpoint's files held in memory: the fs.FS the sidecar
// publishes from a request's chunks (PublishCheckpointFS), and the
// FileSink it hydrates into before it streams a restore, so neither needs
// a local directory. Names are slash-separated relative paths; the
// directories between them are implied. Safe for concurrent use.
type MemFiles struct {
	mu    sync.Mutex
	files map[string][]byte
}

// NewMemFiles returns an empty set of files.
func NewMemFiles() *MemFiles { return &MemFiles{files: map[string][]byte{}} }

// WriteFile stores body as the file name, replacing it if it exists. It
// keeps body itself, not a copy.
func (m *MemFiles) WriteFile(name string, body []byte) (string, error) {
	if !fs.ValidPath(name) || name == "." {
		return "", &fs.PathError{Op: "write", Path: name, Err: fs.ErrInvalid}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[name] = body
	return name, nil
}

// Remove drops the file name; removing a missing file is no error.
func (m *MemFiles) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.files, name)
	return nil
}

// Names lists the files, in lexical order (fs.WalkDir's order).
func (m *MemFiles) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := make([]string, 0, len(m.files))
	for n := range m.files {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Size is the total size of the files.
func (m *MemFiles) Size() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, b := range m.files {
		n += int64(len(b))
	}
	return n
}

// ReadFile returns a copy of the file name (fs.ReadFileFS).
func (m *MemFiles) ReadFile(name string) ([]byte, error) {
	b, err := m.body(name)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b), nil
}

// body returns the file name as stored: Open reads it without a copy.
func (m *MemFiles) body(name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return b, nil
}

// Open opens the file or implied directory name.
func (m *MemFiles) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if b, err := m.body(name); err == nil {
		return &memFile{info: memInfo{name: path.Base(name), size: int64(len(b))}, r: bytes.NewReader(b)}, nil
	}
	entries, err := m.ReadDir(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{info: memInfo{name: path.Base(name), dir: true}, entries: entries}, nil
}

// ReadDir lists the directory name, in name order.
func (m *MemFiles) ReadDir(name string) ([]fs.DirEntry, error) {
	prefix := name + "/"
	if name == "." {
		prefix = ""
	}
	m.mu.Lock()
	seen := map[string]memInfo{}
	for n, b := range m.files {
		rest, ok := strings.CutPrefix(n, prefix)
		if !ok {
			continue
		}
		if first, _, isDir := strings.Cut(rest, "/"); isDir {
			seen[first] = memInfo{name: first, dir: true}
		} else if _, ok := seen[rest]; !ok {
			seen[rest] = memInfo{name: rest, size: int64(len(b))}
		}
	}
	m.mu.Unlock()
	if len(seen) == 0 && name != "." {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	out := make([]fs.DirEntry, 0, len(seen))
	for _, info := range seen {
		out = append(out, fs.FileInfoToDirEntry(info))
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

type memInfo struct {
	name string
	size int64
	dir  bool
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}

// memFile is an open file or directory of MemFiles.
type memFile struct {
	info    memInfo
	r       *bytes.Reader
	entries []fs.DirEntry
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }

func (f *memFile) Read(p []byte) (int, error) {
	if f.r == nil {
		return 0, &fs.PathError{Op: "read", Path: f.info.name, Err: errors.New("is a directory")}
	}
	return f.r.Read(p)
}

// ReadDir lists a directory's entries, n at a time (n <= 0: all).
func (f *memFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if f.r != nil {
		return nil, &fs.PathError{Op: "readdir", Path: f.info.name, Err: errors.New("not a directory")}
	}
	if n <= 0 {
		out := f.entries
		f.entries = nil
		return out, nil
	}
	if len(f.entries) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(f.entries))
	out := f.entries[:n]
	f.entries = f.entries[n:]
	return out, nil
}

// copyBuffer is the buffer of one file streaming to disk.
const copyBuffer = 1 << 20
