package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
	"github.com/shardfence/shardfence/master/internal/alloc"
	"github.com/shardfence/shardfence/master/internal/snapcodec"
)

// A complete snapshot is the whole master state at one instant, as files:
//
//	manifest            the manifest line (see snapclock.go)
//	segments            header, then one record per segment
//	objects-NNNNNN      header, then up to ObjectsPerChunk object records
//	fleet               header, then one record per sidecar node and per
//	                    shard assignment (absent in snapshots taken before
//	                    the fleet existed: the table restores empty)
//
// Every payload file opens with a header naming the format, the snapshot
// version (which must be the manifest's), the snapshot id and what follows;
// the segments header also counts the object files and objects, so a
// missing or extra chunk fails the restore. Deadlines are int64 steady
// nanoseconds in 2.0.0 and wall-clock Unix milliseconds in 1.0.0; a
// soft-pin deadline is nil when none was granted. The files are published
// as a checkpoint of the operation log (see package ha): the checkpoint
// manifest, created last, is what makes a snapshot visible.

// Snapshot file names.
const (
	SnapshotManifestFile = "manifest"
	snapshotSegmentsFile = "segments"
	snapshotFleetFile    = "fleet"
	snapshotObjectsFile  = "objects-"
	payloadFormat        = "shardfence.master.snapshot"
	// ObjectsPerChunk is how many objects one objects file holds.
	ObjectsPerChunk = 1 << 18
)

// Snapshot is a frozen copy of the master state, taken by Freeze. The
// objects are held already encoded, stripe by stripe: the copy is the
// payload records themselves (no pointers for the collector to scan, and
// about a third of the memory of a copy of the records' fields), and
// WriteFiles only frames them into chunks.
type Snapshot struct {
	Clock ClockPair // (S0, C0), captured while frozen
	// Pause is how long the freeze held every logged change back; reads
	// never waited.
	Pause time.Duration
	// Copy is how long copying (encoding) the objects took (changes went
	// on, each stripe's first change after the freeze copying that stripe
	// first).
	Copy     time.Duration
	format   SnapshotFormat
	segments []snapSegment
	parts    []snapPart // one per metadata stripe
	nodes    []*masterv1.NodeRecord
	fleet    []*masterv1.ShardAssignment
}

// snapPart is one metadata stripe's objects as they were at the freeze:
// their records, encoded, and where each record ends.
type snapPart struct {
	recs []byte
	ends []uint32
	// err is a deadline the format cannot hold (a 1.0.0 wall-clock
	// conversion that overflows): the snapshot cannot be written.
	err error
}

type snapSegment struct {
	id, base, size uint64
	name, client   string
	endpoint       string
	serving        bool
}

// snapshotCopy is a snapshot whose stripes are still being copied.
type snapshotCopy struct {
	format SnapshotFormat
	clock  ClockPair
	parts  []snapPart
	// copied[i] is guarded by stripe i's lock: the copier takes it shared,
	// a change exclusively, so exactly one of them copies the stripe.
	copied []bool
}

// Objects is the number of objects frozen.
func (s *Snapshot) Objects() int {
	n := 0
	for i := range s.parts {
		n += len(s.parts[i].ends)
	}
	return n
}

// Freeze copies the whole state as it was at one instant, in the given
// format, without stopping reads and holding changes back only for an
// instant:
//
//  1. take the topology lock exclusively, which every logged change holds
//     shared: no change is in progress, and none starts;
//  2. call cut (the operation log ends a batch there, so the snapshot is
//     exactly the log up to that point), capture the clock pair (S0, C0)
//     once, copy the segments, and mark every metadata stripe as owed to
//     the snapshot; release the lock (the pause ends here);
//  3. copy (encode) the stripes under their read lock, GOMAXPROCS at a
//     time. A change to a stripe not copied yet copies it first, under its
//     write lock (preserve), so every stripe is copied as it was at the
//     freeze.
//
// Lease deadlines are read as the copy meets them: a read lease granted
// since the freeze may show, which only keeps an object longer.
func (m *Master) Freeze(cut func(), format SnapshotFormat) *Snapshot {
	s, c := m.freeze(cut, format)
	m.copyStripes(s, c)
	return s
}

// freeze is steps 1 and 2 of Freeze.
func (m *Master) freeze(cut func(), format SnapshotFormat) (*Snapshot, *snapshotCopy) {
	start := time.Now()
	m.topo.Lock()
	if cut != nil {
		cut()
	}
	s := &Snapshot{Clock: m.clockPair(), format: format}
	s.segments = make([]snapSegment, 0, len(m.segments))
	for _, seg := range m.segments {
		s.segments = append(s.segments, snapSegment{
			id: seg.id, base: seg.base, size: seg.size, name: seg.name, client: seg.client.id,
			endpoint: seg.endpointString(), serving: seg.state == segmentServing,
		})
	}
	// The fleet changes only under topo shared, so its table is at the cut
	// too; its records are immutable, so the copy is of pointers.
	s.nodes, s.fleet = m.fleet.freeze()
	c := &snapshotCopy{format: format, clock: s.Clock, parts: make([]snapPart, len(m.stripes)), copied: make([]bool, len(m.stripes))}
	m.cow.Store(c)
	m.topo.Unlock()
	s.Pause = time.Since(start)
	sort.Slice(s.segments, func(i, j int) bool { return s.segments[i].id < s.segments[j].id })
	return s, c
}

// copyStripes is step 3 of Freeze, by GOMAXPROCS workers taking the
// stripes in turn.
func (m *Master) copyStripes(s *Snapshot, c *snapshotCopy) {
	copyStart := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(m.stripes)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(m.stripes) {
					return
				}
				sp := &m.stripes[i]
				sp.mu.RLock()
				if !c.copied[i] {
					c.parts[i] = c.copyStripe(sp)
					c.copied[i] = true
				}
				sp.mu.RUnlock()
			}
		})
	}
	wg.Wait()
	m.cow.Store(nil)
	s.parts = c.parts
	s.Copy = time.Since(copyStart)
}

// preserve copies sp into the snapshot being taken, if it has not been
// yet, before the change the caller is about to make. The caller holds
// sp.mu exclusively.
func (m *Master) preserve(sp *stripe) {
	c := m.cow.Load()
	if c == nil || c.copied[sp.idx] {
		return
	}
	c.parts[sp.idx] = c.copyStripe(sp)
	c.copied[sp.idx] = true
}

// copyStripe encodes one stripe's objects. The caller holds its lock.
func (c *snapshotCopy) copyStripe(sp *stripe) snapPart {
	p := snapPart{recs: make([]byte, 0, len(sp.objects)*72), ends: make([]uint32, 0, len(sp.objects))}
	w := snapcodec.Encoder{B: p.recs}
	for _, o := range sp.objects {
		if err := encodeObject(&w, o, c.format, c.clock); err != nil {
			return snapPart{err: err}
		}
		p.ends = append(p.ends, uint32(len(w.B)))
	}
	p.recs = w.B
	return p
}

// clockPair reads both clocks together.
func (m *Master) clockPair() ClockPair {
	return ClockPair{Wall: m.clock.Wall().UnixNano(), Steady: m.clock.Steady()}
}

// SnapshotFile is one encoded file of a snapshot.
type SnapshotFile struct {
	Name string
	Path string
	Size int64
}

// WriteFiles writes the snapshot under dir, in the format it was frozen
// in, and returns its files, the manifest first. id names the snapshot.
// The objects chunks are written by GOMAXPROCS workers.
func (s *Snapshot) WriteFiles(dir string, id string) ([]SnapshotFile, error) {
	for i := range s.parts {
		if err := s.parts[i].err; err != nil {
			return nil, fmt.Errorf("snapshot %q: %w", id, err)
		}
	}
	format := s.format
	man := SnapshotManifest{Version: format.version(), ID: id}
	if format == SnapshotV2 {
		man.Clock = s.Clock
	}
	line, err := FormatSnapshotManifest(man)
	if err != nil {
		return nil, err
	}
	total := s.Objects()
	chunks := (total + ObjectsPerChunk - 1) / ObjectsPerChunk
	files := make([]SnapshotFile, 3+chunks)
	write := func(slot int, name string, b []byte) error {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("snapshot %q file %q: %w", id, name, err)
		}
		files[slot] = SnapshotFile{Name: name, Path: path, Size: int64(len(b))}
		return nil
	}
	if err := write(0, SnapshotManifestFile, []byte(line)); err != nil {
		return nil, err
	}
	w := snapcodec.Encoder{B: make([]byte, 0, 64<<10)}
	encodeHeader(&w, man, snapshotSegmentsFile, len(s.segments))
	w.Uint(uint64(chunks))
	w.Uint(uint64(total))
	for _, sg := range s.segments {
		w.Arr(7)
		w.Uint(sg.id)
		w.Str(sg.name)
		w.Str(sg.client)
		w.Uint(sg.base)
		w.Uint(sg.size)
		w.Str(sg.endpoint)
		w.Bool(sg.serving)
	}
	if err := write(1, snapshotSegmentsFile, w.B); err != nil {
		return nil, err
	}
	w.B = w.B[:0]
	encodeHeader(&w, man, snapshotFleetFile, len(s.nodes)+len(s.fleet))
	for _, n := range s.nodes {
		if err := encodeFleetRecord(&w, fleetRecordNode, n); err != nil {
			return nil, err
		}
	}
	for _, a := range s.fleet {
		if err := encodeFleetRecord(&w, fleetRecordShard, a); err != nil {
			return nil, err
		}
	}
	if err := write(2, snapshotFleetFile, w.B); err != nil {
		return nil, err
	}
	// Where each part starts in the object order, so a worker finds the
	// first object of chunk c without walking the parts before it.
	starts := make([]int, len(s.parts)+1)
	for i := range s.parts {
		starts[i+1] = starts[i] + len(s.parts[i].ends)
	}
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				lo := c * ObjectsPerChunk
				count := min(ObjectsPerChunk, total-lo)
				part := sort.Search(len(s.parts), func(i int) bool { return starts[i+1] > lo })
				if err := s.writeChunk(dir, id, man, c, count, part, lo-starts[part], files); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return files, nil
}

// writeChunk writes objects chunk c: its header, then count records from
// record at of part onwards, taken from the parts as they are.
func (s *Snapshot) writeChunk(dir, id string, man SnapshotManifest, c, count, part, at int, files []SnapshotFile) (err error) {
	name := chunkName(c)
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("snapshot %q file %q: %w", id, name, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("snapshot %q file %q: %w", id, name, cerr)
		}
	}()
	var w snapcodec.Encoder
	encodeHeader(&w, man, name, count)
	size := int64(len(w.B))
	if _, err := f.Write(w.B); err != nil {
		return fmt.Errorf("snapshot %q file %q: %w", id, name, err)
	}
	for count > 0 {
		p := &s.parts[part]
		k := min(count, len(p.ends)-at)
		if k > 0 {
			from := uint32(0)
			if at > 0 {
				from = p.ends[at-1]
			}
			b := p.recs[from:p.ends[at+k-1]]
			if _, err := f.Write(b); err != nil {
				return fmt.Errorf("snapshot %q file %q: %w", id, name, err)
			}
			size += int64(len(b))
		}
		count -= k
		part, at = part+1, 0
	}
	files[3+c] = SnapshotFile{Name: name, Path: path, Size: size}
	return nil
}

func chunkName(c int) string { return fmt.Sprintf("%s%06d", snapshotObjectsFile, c) }

// encodeObject writes one object record: 13 fields, the deadlines in the
// format's domain (clock is the snapshot's pair, for 1.0.0). The caller
// holds the object's stripe lock.
func encodeObject(w *snapcodec.Encoder, o *object, format SnapshotFormat, clock ClockPair) error {
	w.Arr(13)
	w.Str(o.tenant.name)
	w.Str(o.key)
	w.Str(o.client.id)
	w.Uint(o.size)
	w.Uint(uint64(o.dataType))
	if o.group != nil {
		w.Str(o.group.key.id)
	} else {
		w.Str("")
	}
	w.Bool(o.hardPinned)
	w.Bool(o.softPinEnabled)
	leaseAt, softAt := o.leaseDeadline(), SteadyTime(o.softPin.Load())
	lease, soft := int64(leaseAt), int64(softAt)
	if format == SnapshotV1 {
		var err error
		if lease, err = legacyWallMS(leaseAt, clock); err != nil {
			return err
		}
		if softAt != 0 {
			if soft, err = legacyWallMS(softAt, clock); err != nil {
				return err
			}
		}
	}
	w.Int(lease)
	if softAt == 0 {
		w.Nil()
	} else {
		w.Int(soft)
	}
	w.Int(o.putStart)
	w.Uint(o.seq)
	w.Arr(len(o.replicas))
	for i := range o.replicas {
		r := &o.replicas[i]
		w.Arr(6)
		w.Uint(r.id)
		w.Uint(uint64(r.kind))
		w.Uint(uint64(r.status))
		if r.seg != nil {
			w.Uint(r.seg.id)
		} else {
			w.Uint(0)
		}
		w.Uint(r.offset)
		w.Uint(r.size)
	}
	return nil
}

// Fleet records: [kind, protobuf body].
const (
	fleetRecordNode  = 1
	fleetRecordShard = 2
)

func encodeFleetRecord(w *snapcodec.Encoder, kind uint64, msg proto.Message) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return err
	}
	w.Arr(2)
	w.Uint(kind)
	if b == nil {
		w.Nil() // an empty message: what the msgpack library wrote for it
	} else {
		w.Bytes(b)
	}
	return nil
}

// encodeHeader opens a payload file: [format, version, id, part, count].
func encodeHeader(w *snapcodec.Encoder, m SnapshotManifest, part string, count int) {
	w.Arr(5)
	w.Str(payloadFormat)
	w.Str(m.Version)
	w.Str(m.ID)
	w.Str(part)
	w.Uint(uint64(count))
}

// SnapshotRestore reports a restore from a complete snapshot.
type SnapshotRestore struct {
	Manifest SnapshotManifest
	Segments int
	Objects  int
	// Dropped counts objects without a complete replica (a put in
	// progress cannot be recovered; hard pin does not change that).
	Dropped int
	// Cleaned counts expired objects dropped by the snapshot cleanup
	// (Config.SnapshotRestoreCleanup).
	Cleaned int
	// Expired counts restored objects whose converted lease had already
	// run out: they stay expired.
	Expired int
}

// RestoreSnapshot loads a complete snapshot into m, which must be empty
// (a fresh master). files maps each file name of the snapshot to a local
// path. The restore clock pair (S1, C1) is read once, before anything is
// decoded, so decoding time is consumed from the remaining leases too.
//
// Everything is decoded and checked before anything is installed: a
// malformed manifest, a payload of another version, a deadline that does
// not convert, a replica on an unknown segment or outside it, a duplicate
// object or a missing chunk refuses the whole snapshot with a
// *SnapshotError and leaves m empty, so the caller can try an older one.
// Segments come back awaiting remount and memory replicas unreadable, as
// after a promotion; deadlines keep their converted historical values (an
// expired one stays expired).
func (m *Master) RestoreSnapshot(ctx context.Context, files map[string]string) (SnapshotRestore, error) {
	return m.restoreSnapshotAt(ctx, files, m.clockPair())
}

func (m *Master) restoreSnapshotAt(ctx context.Context, files map[string]string, now ClockPair) (res SnapshotRestore, err error) {
	defer func() {
		switch {
		case err == nil:
			if res.Manifest.Version == SnapshotVersion1 {
				m.metrics.snapshotRestoresV1.Inc()
			} else {
				m.metrics.snapshotRestoresV2.Inc()
			}
		case errors.Is(err, ErrClockConversion):
			m.metrics.clockConversionFailures.Inc()
		}
	}()
	body, err := readSnapshotFile(files, SnapshotManifestFile, 4096)
	if err != nil {
		return res, &SnapshotError{File: SnapshotManifestFile, Err: ErrSnapshotPayload, Detail: err.Error()}
	}
	man, err := ParseSnapshotManifest(string(body))
	if err != nil {
		return res, err
	}
	res.Manifest = man
	bad := func(file string, err error, format string, args ...any) (SnapshotRestore, error) {
		return SnapshotRestore{}, &SnapshotError{ID: man.ID, File: file, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	if !m.empty() {
		return bad("", ErrInvalidArgument, "restore into a master that already holds objects or segments")
	}
	st := &restoreState{tenants: map[string]*tenant{}, clients: map[string]*client{}, groups: map[groupKey]*group{}, quotas: m.cfg.TenantQuotas}
	b, err := readPayload(files, snapshotSegmentsFile, nil)
	if err != nil {
		return bad(snapshotSegmentsFile, ErrSnapshotPayload, "%v", err)
	}
	segs, chunks, total, err := decodeSegments(b, man, st)
	if err != nil {
		return bad(snapshotSegmentsFile, ErrSnapshotPayload, "%v", err)
	}
	// Objects: every chunk decoded and checked before any is installed.
	dec := m.decodeChunks(ctx, files, chunks, man, segs, now, st)
	sum, err := sumChunks(dec, total)
	if err != nil {
		var ce *chunkError
		switch {
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return bad("", err, "restore interrupted")
		case errors.As(err, &ce) && ce.conv:
			return bad(chunkName(ce.chunk), ErrClockConversion, "%v", ce.err)
		case errors.As(err, &ce) && ce.chunk >= 0:
			return bad(chunkName(ce.chunk), ErrSnapshotPayload, "%v", ce.err)
		case errors.As(err, &ce):
			return bad(snapshotSegmentsFile, ErrSnapshotPayload, "%v", ce.err)
		}
		return bad("", ErrSnapshotPayload, "%v", err)
	}
	res.Dropped, res.Cleaned, res.Expired = sum.dropped, sum.cleaned, sum.expired
	if extra := fmt.Sprintf("%s%06d", snapshotObjectsFile, chunks); files[extra] != "" {
		return bad(extra, ErrSnapshotPayload, "a chunk past the %d the segments file counts", chunks)
	}
	built, err := m.buildStripes(dec)
	if err != nil {
		var de *dupError
		if errors.As(err, &de) {
			return bad(chunkName(de.chunk), ErrSnapshotPayload, "%v", err)
		}
		return bad("", ErrSnapshotPayload, "%v", err)
	}
	if err := checkRanges(segs, dec, built); err != nil {
		return bad("", ErrSnapshotPayload, "%v", err)
	}
	nodes, assigns, err := readFleet(files, man)
	if err != nil {
		return bad(snapshotFleetFile, ErrSnapshotPayload, "%v", err)
	}
	m.install(st, segs, dec, built, sum.maxReplica)
	m.fleet.install(nodes, assigns)
	res.Segments, res.Objects = len(segs), built.objects
	return res, nil
}

// decodeSegments reads the segments file: the segments (awaiting their
// remount), and the number of object chunks and objects the snapshot
// holds. It refuses a malformed file, a segment listed twice and counts
// that cannot be.
func decodeSegments(b []byte, man SnapshotManifest, st *restoreState) (segs map[uint64]*segment, chunks int, total uint64, err error) {
	r := snapcodec.NewDecoder(b)
	nsegs := decodeHeader(&r, man, snapshotSegmentsFile)
	nchunks, total := r.Uint(), r.Uint()
	segs = map[uint64]*segment{}
	for i := 0; i < nsegs && r.Err == nil; i++ {
		r.Arr(7)
		sg := &segment{id: r.Uint(), name: r.Str(), client: st.client(r.Str()), base: r.Uint(), size: r.Uint(), state: segmentAwaitingRemount}
		_ = r.StrBytes() // the endpoint: a remount proves a new one
		_ = r.Bool()
		switch {
		case r.Err != nil:
		case sg.id == 0 || sg.size == 0 || sg.client.id == "" || sg.base+sg.size < sg.base:
			r.Fail("segment %d: needs an id, a size and a client", sg.id)
		case segs[sg.id] != nil:
			r.Fail("segment %d listed twice", sg.id)
		}
		segs[sg.id] = sg
	}
	r.End()
	if r.Err != nil {
		return nil, 0, 0, r.Err
	}
	if nchunks > math.MaxInt32 || total > nchunks*ObjectsPerChunk {
		return nil, 0, 0, fmt.Errorf("%d objects in %d files", total, nchunks)
	}
	return segs, int(nchunks), total, nil
}

// decodeChunks decodes every objects chunk, GOMAXPROCS at a time; a
// worker stops at its first error or when ctx ends, leaving the chunks it
// did not reach undecoded (done < 0).
func (m *Master) decodeChunks(ctx context.Context, files map[string]string, chunks int, man SnapshotManifest, segs map[uint64]*segment, now ClockPair, st *restoreState) []decodedChunk {
	dec := make([]decodedChunk, chunks)
	for c := range dec {
		dec[c].done = -1
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			w := restoreWorker{st: st, tenants: map[string]*tenant{}, clients: map[string]*client{}, groups: map[groupKey]*group{}}
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				if err := ctx.Err(); err != nil {
					dec[c].err = err
					return
				}
				dec[c] = m.decodeChunk(&w, files, c, chunks, man, segs, now)
				if dec[c].err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return dec
}

// chunkSum is what the decoded chunks add up to.
type chunkSum struct {
	dropped, cleaned, expired int
	maxReplica                uint64
}

// chunkError is a chunk's refusal (chunk -1: the chunks disagree with the
// segments file's count); conv marks a deadline that did not convert.
type chunkError struct {
	chunk int
	conv  bool
	err   error
}

func (e *chunkError) Error() string { return e.err.Error() }

func (e *chunkError) Unwrap() error { return e.err }

// sumChunks adds the decoded chunks up, a pure step: the first chunk's
// error in file order (the context's as it is), a chunk no worker reached,
// or a total other than the segments file's is refused.
func sumChunks(dec []decodedChunk, total uint64) (chunkSum, error) {
	var sum chunkSum
	decoded := uint64(0)
	for c := range dec {
		d := &dec[c]
		if d.err != nil {
			if errors.Is(d.err, context.Canceled) || errors.Is(d.err, context.DeadlineExceeded) {
				return sum, d.err
			}
			return sum, &chunkError{chunk: c, conv: d.conv, err: d.err}
		}
		if d.done < 0 {
			// A worker stopped at an earlier chunk's error or the
			// context; that chunk reported it above.
			return sum, fmt.Errorf("chunk %d not decoded", c)
		}
		decoded += uint64(d.done)
		sum.dropped += d.dropped
		sum.cleaned += d.cleaned
		sum.expired += d.expired
		sum.maxReplica = max(sum.maxReplica, d.maxReplica)
	}
	if decoded != total {
		return sum, &chunkError{chunk: -1, err: fmt.Errorf("the segments file counts %d objects, the chunks hold %d", total, decoded)}
	}
	return sum, nil
}

// decodedChunk is one objects chunk decoded: the objects it keeps, in
// file order, with the metadata stripe of each.
type decodedChunk struct {
	objs   []*object
	stripe []uint32
	// gone are the keys of objects decoded but not kept (no complete
	// replica, or cleaned up): they still count against duplicates.
	gone                      []goneKey
	done                      int // records decoded; -1 when not reached
	dropped, cleaned, expired int
	maxReplica                uint64
	err                       error
	conv                      bool // err is a deadline conversion failure
}

type goneKey struct {
	key    objectKey
	stripe uint32
}

// restoreWorker is one decoding worker's view of the restore: it finds
// tenants, clients and groups in its own maps first and takes the shared
// ones, under their lock, only for a name it has not met.
type restoreWorker struct {
	st      *restoreState
	tenants map[string]*tenant
	clients map[string]*client
	groups  map[groupKey]*group
	buf     []byte
}

func (w *restoreWorker) tenant(name []byte) *tenant {
	if t := w.tenants[string(name)]; t != nil {
		return t
	}
	w.st.mu.Lock()
	t := w.st.tenant(string(name))
	w.st.mu.Unlock()
	w.tenants[t.name] = t
	return t
}

func (w *restoreWorker) client(id []byte) *client {
	if c := w.clients[string(id)]; c != nil {
		return c
	}
	w.st.mu.Lock()
	c := w.st.client(string(id))
	w.st.mu.Unlock()
	w.clients[c.id] = c
	return c
}

func (w *restoreWorker) group(tenant string, id []byte) *group {
	if g := w.groups[groupKey{tenant, string(id)}]; g != nil {
		return g
	}
	w.st.mu.Lock()
	g := w.st.group(groupKey{tenant, string(id)})
	w.st.mu.Unlock()
	w.groups[g.key] = g
	return g
}

// decodeChunk reads and decodes objects chunk c of chunks.
func (m *Master) decodeChunk(w *restoreWorker, files map[string]string, c, chunks int, man SnapshotManifest, segs map[uint64]*segment, now ClockPair) decodedChunk {
	out := decodedChunk{done: -1}
	name := chunkName(c)
	b, err := readPayload(files, name, w.buf)
	if err != nil {
		out.err = err
		return out
	}
	w.buf = b
	r := snapcodec.NewDecoder(b)
	n := decodeHeader(&r, man, name)
	if r.Err == nil && (n > ObjectsPerChunk || (c < chunks-1 && n != ObjectsPerChunk)) {
		r.Fail("%d objects in a chunk (every chunk but the last holds %d)", n, ObjectsPerChunk)
	}
	if r.Err != nil {
		out.err = r.Err
		return out
	}
	out.objs = make([]*object, 0, n)
	out.stripe = make([]uint32, 0, n)
	for i := 0; i < n && r.Err == nil; i++ {
		o, err := w.decodeObject(&r, man, segs, now)
		if err != nil {
			out.err, out.conv = fmt.Errorf("object %d: %w", i, err), true
			return out
		}
		if r.Err != nil {
			break
		}
		sp := uint32(m.stripeFor(o.tenant.name, o.key).idx)
		if len(o.replicas) == 0 {
			out.dropped++
			out.gone = append(out.gone, goneKey{objectKey{o.tenant.name, o.key}, sp})
			continue
		}
		for _, rp := range o.replicas {
			out.maxReplica = max(out.maxReplica, rp.id)
		}
		if m.cfg.SnapshotRestoreCleanup && !o.hardPinned && o.leaseExpired(now.Steady) && !o.softPinActive(now.Steady) {
			out.cleaned++
			out.gone = append(out.gone, goneKey{objectKey{o.tenant.name, o.key}, sp})
			continue
		}
		if o.leaseExpired(now.Steady) {
			out.expired++
		}
		out.objs = append(out.objs, o)
		out.stripe = append(out.stripe, sp)
	}
	r.End()
	if r.Err != nil {
		out.err = r.Err
		return out
	}
	out.done = n
	return out
}

// restoreState holds the tenants, clients and groups a restore creates,
// apart from the master until the whole snapshot is accepted. The
// decoding workers share it under mu.
type restoreState struct {
	mu      sync.Mutex
	tenants map[string]*tenant
	clients map[string]*client
	groups  map[groupKey]*group
	quotas  map[string]uint64
}

func (st *restoreState) tenant(name string) *tenant {
	return lookupOrAdd(st.tenants, name, st.newTenant)
}

func (st *restoreState) newTenant(name string) *tenant {
	return &tenant{name: name, quota: st.quotas[name]}
}

func (st *restoreState) client(id string) *client { return lookupOrAdd(st.clients, id, newClient) }

func (st *restoreState) group(k groupKey) *group { return lookupOrAdd(st.groups, k, newGroup) }

// objectWithReplica is an object and its one replica in one allocation,
// which is what nearly every object holds: half the allocations of a
// restore. A later change that replaces the replicas leaves the slot
// unused; it goes with the object.
type objectWithReplica struct {
	o   object
	rep [1]replica
}

// decodeObject reads one object record and converts its deadlines. A
// malformed record is r.Err; a conversion failure is returned.
func (w *restoreWorker) decodeObject(r *snapcodec.Decoder, man SnapshotManifest, segs map[uint64]*segment, now ClockPair) (*object, error) {
	r.Arr(13)
	tenant, key, client := r.StrBytes(), r.Str(), r.StrBytes()
	size := r.Uint()
	dt := r.Uint()
	group := r.StrBytes()
	hardPinned, softPinEnabled := r.Bool(), r.Bool()
	lease := r.Int()
	soft, hasSoft := r.OptInt()
	putStart := r.Int()
	seq := r.Uint()
	nrep := r.ArrLen()
	if r.Err != nil {
		return nil, nil
	}
	switch {
	case key == "" || len(key) > maxKeyLen || len(tenant) > maxKeyLen:
		r.Fail("key of %d bytes, tenant of %d (keys are 1 to %d bytes)", len(key), len(tenant), maxKeyLen)
	case len(client) == 0:
		r.Fail("object (%q, %q) without a client", tenant, key)
	case dt > math.MaxUint32:
		r.Fail("data type %d", dt)
	case nrep > maxReplicas:
		r.Fail("%d replicas", nrep)
	}
	if r.Err != nil {
		return nil, nil
	}
	var o *object
	if nrep == 1 {
		x := new(objectWithReplica)
		o = &x.o
		o.replicas = x.rep[:0:1]
	} else {
		o = &object{replicas: make([]replica, 0, nrep)}
	}
	o.key, o.size, o.dataType, o.seq, o.putStart = key, size, uint32(dt), seq, putStart
	o.hardPinned, o.softPinEnabled = hardPinned, softPinEnabled
	var err error
	var l, s SteadyTime
	if man.Version == SnapshotVersion1 {
		if l, err = convertV1(lease, now); err == nil && hasSoft {
			s, err = convertV1(soft, now)
		}
	} else {
		if l, err = convertV2(SteadyTime(lease), man.Clock, now); err == nil && hasSoft {
			s, err = convertV2(SteadyTime(soft), man.Clock, now)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("object (%q, %q): %w", tenant, key, err)
	}
	o.lease.Store(int64(l))
	o.softPin.Store(int64(s))
	for j := 0; j < nrep && r.Err == nil; j++ {
		r.Arr(6)
		rp := replica{id: r.Uint(), handle: alloc.NoHandle}
		kind, status := r.Uint(), r.Uint()
		seg, off, size := r.Uint(), r.Uint(), r.Uint()
		if r.Err != nil {
			break
		}
		rp.kind, rp.status, rp.offset, rp.size = ReplicaKind(kind), ReplicaStatus(status), off, size
		switch {
		case kind != uint64(MemoryReplica) && kind != uint64(DiskReplica):
			r.Fail("object (%q, %q): replica %d of kind %d", tenant, key, rp.id, kind)
		case status < uint64(ReplicaProcessing) || status > uint64(ReplicaFailed):
			r.Fail("object (%q, %q): replica %d of status %d", tenant, key, rp.id, status)
		case rp.kind == MemoryReplica && segs[seg] == nil:
			r.Fail("object (%q, %q): replica %d on segment %d, which the snapshot does not describe", tenant, key, rp.id, seg)
		case rp.kind == MemoryReplica && (size == 0 || off+size < off):
			r.Fail("object (%q, %q): replica %d range %d+%d", tenant, key, rp.id, off, size)
		}
		if rp.status != ReplicaComplete {
			continue // in progress or gone: not recoverable, hard pin or not
		}
		if rp.kind == MemoryReplica {
			rp.seg = segs[seg]
		}
		o.replicas = append(o.replicas, rp)
	}
	if r.Err == nil {
		o.tenant, o.client = w.tenant(tenant), w.client(client)
		if len(group) > 0 {
			o.group = w.group(o.tenant.name, group)
		}
	}
	return o, nil
}

// builtStripes are the restored objects' stripe maps, made beside the
// master's and put in place only once the snapshot is accepted.
type builtStripes struct {
	maps    []map[objectKey]*object
	objects int
	// Per tenant and per segment sums, to add at install.
	used     map[*tenant]tenantSum
	replicas map[*segment]int64
}

type tenantSum struct {
	bytes   uint64
	objects int64
}

// dupError is an object listed twice; chunk is where it shows again.
type dupError struct {
	key   objectKey
	chunk int
}

func (e *dupError) Error() string {
	return fmt.Sprintf("object (%q, %q) listed twice", e.key.tenant, e.key.key)
}

// buildStripes fills a map per metadata stripe, each sized for what it
// receives, by GOMAXPROCS workers that each own a range of stripes: no
// lock, no map growth. A key met twice (kept or not) refuses the snapshot.
func (m *Master) buildStripes(dec []decodedChunk) (*builtStripes, error) {
	n := len(m.stripes)
	counts := make([]int, n)
	gone := false
	for c := range dec {
		for _, s := range dec[c].stripe {
			counts[s]++
		}
		gone = gone || len(dec[c].gone) > 0
	}
	b := &builtStripes{maps: make([]map[objectKey]*object, n), used: map[*tenant]tenantSum{}, replicas: map[*segment]int64{}}
	workers := min(runtime.GOMAXPROCS(0), n)
	errs := make([]*dupError, workers)
	sums := make([]*builtStripes, workers)
	var wg sync.WaitGroup
	for wi := range workers {
		lo, hi := uint32(wi*n/workers), uint32((wi+1)*n/workers)
		wg.Go(func() {
			sums[wi] = &builtStripes{used: map[*tenant]tenantSum{}, replicas: map[*segment]int64{}}
			errs[wi] = b.fill(dec, lo, hi, counts, gone, sums[wi])
		})
	}
	wg.Wait()
	var first *dupError
	for _, e := range errs {
		if e != nil && (first == nil || e.chunk < first.chunk) {
			first = e
		}
	}
	if first != nil {
		return nil, first
	}
	for _, s := range sums {
		b.add(s)
	}
	return b, nil
}

// add adds a worker's per-tenant and per-segment sums to b's.
func (b *builtStripes) add(s *builtStripes) {
	for t, v := range s.used {
		x := b.used[t]
		x.bytes += v.bytes
		x.objects += v.objects
		b.used[t] = x
		b.objects += int(v.objects)
	}
	for sg, v := range s.replicas {
		b.replicas[sg] += v
	}
}

// fill is one buildStripes worker: it makes the maps of stripes lo..hi-1
// (sized by counts) and fills them from every chunk, in file order, adding
// the tenant and segment sums to mine. It stops at the first key met twice
// (gone: some chunk dropped objects, whose keys count too).
func (b *builtStripes) fill(dec []decodedChunk, lo, hi uint32, counts []int, gone bool, mine *builtStripes) *dupError {
	for s := lo; s < hi; s++ {
		b.maps[s] = make(map[objectKey]*object, counts[s])
	}
	var goneSets map[uint32]map[objectKey]struct{}
	for c := range dec {
		d := &dec[c]
		for j, s := range d.stripe {
			if s < lo || s >= hi {
				continue
			}
			o := d.objs[j]
			k := objectKey{o.tenant.name, o.key}
			if _, ok := goneSets[s][k]; ok {
				return &dupError{key: k, chunk: c}
			}
			// One hash per object: a key already there does not grow
			// the map (what it overwrote no longer matters: the
			// snapshot is refused).
			mp := b.maps[s]
			before := len(mp)
			mp[k] = o
			if len(mp) == before {
				return &dupError{key: k, chunk: c}
			}
			mine.count(o)
		}
		if !gone {
			continue
		}
		for _, g := range d.gone {
			if g.stripe < lo || g.stripe >= hi {
				continue
			}
			_, kept := b.maps[g.stripe][g.key]
			_, dropped := goneSets[g.stripe][g.key]
			if kept || dropped {
				return &dupError{key: g.key, chunk: c}
			}
			if goneSets == nil {
				goneSets = map[uint32]map[objectKey]struct{}{}
			}
			if goneSets[g.stripe] == nil {
				goneSets[g.stripe] = map[objectKey]struct{}{}
			}
			goneSets[g.stripe][g.key] = struct{}{}
		}
	}
	return nil
}

// count adds o to its tenant's sums and its memory replicas to their
// segments'.
func (b *builtStripes) count(o *object) {
	t := b.used[o.tenant]
	t.bytes += o.memoryBytes()
	t.objects++
	b.used[o.tenant] = t
	for i := range o.replicas {
		if rp := &o.replicas[i]; rp.kind == MemoryReplica && rp.seg != nil {
			b.replicas[rp.seg]++
		}
	}
}

// checkRanges refuses replicas that leave their segment or overlap: the
// remount would refuse them later, after the snapshot had been accepted.
// Each segment's ranges are sorted in GOMAXPROCS pieces at once, then
// walked in merged order.
func checkRanges(segs map[uint64]*segment, dec []decodedChunk, b *builtStripes) error {
	per := make(map[*segment][]ext, len(b.replicas))
	for s, n := range b.replicas {
		per[s] = make([]ext, 0, n)
	}
	for c := range dec {
		for _, o := range dec[c].objs {
			for _, r := range o.replicas {
				if r.kind != MemoryReplica {
					continue
				}
				if r.offset+r.size > r.seg.size {
					return fmt.Errorf("object (%q, %q): replica %d ends at %d, past segment %d of %d bytes", o.tenant.name, o.key, r.id, r.offset+r.size, r.seg.id, r.seg.size)
				}
				per[r.seg] = append(per[r.seg], ext{r.offset, r.offset + r.size})
			}
		}
	}
	for s, es := range per {
		if at, ok := overlap(es); ok {
			return fmt.Errorf("segment %d: replicas at %d and %d overlap", s.id, at[0], at[1])
		}
	}
	return nil
}

type ext struct{ off, end uint64 }

// overlap sorts es (in pieces, concurrently, when it is large) and
// reports the first two ranges it finds overlapping, by offset.
func overlap(es []ext) ([2]uint64, bool) {
	cmp := func(a, b ext) int {
		switch {
		case a.off < b.off:
			return -1
		case a.off > b.off:
			return 1
		}
		return 0
	}
	pieces := 1
	if len(es) >= 1<<16 {
		pieces = runtime.GOMAXPROCS(0)
	}
	parts := make([][]ext, pieces)
	var wg sync.WaitGroup
	for i := range pieces {
		parts[i] = es[i*len(es)/pieces : (i+1)*len(es)/pieces]
		wg.Go(func() { slices.SortFunc(parts[i], cmp) })
	}
	wg.Wait()
	// Merge walk: the next range in offset order is the smallest head.
	var prev ext
	have := false
	for {
		best := -1
		for i, p := range parts {
			if len(p) > 0 && (best < 0 || p[0].off < parts[best][0].off) {
				best = i
			}
		}
		if best < 0 {
			return [2]uint64{}, false
		}
		e := parts[best][0]
		parts[best] = parts[best][1:]
		if have && e.off < prev.end {
			return [2]uint64{prev.off, e.off}, true
		}
		if !have || e.end > prev.end {
			prev = e
		}
		have = true
	}
}

// empty reports whether m holds no object and no segment.
func (m *Master) empty() bool {
	m.topo.RLock()
	defer m.topo.RUnlock()
	if len(m.segments) > 0 {
		return false
	}
	for i := range m.stripes {
		sp := &m.stripes[i]
		sp.mu.RLock()
		n := len(sp.objects)
		sp.mu.RUnlock()
		if n > 0 {
			return false
		}
	}
	return true
}

// install puts decoded segments and objects in place. Nothing is logged:
// a restore rebuilds what the log (and the snapshot) already hold.
func (m *Master) install(st *restoreState, segs map[uint64]*segment, dec []decodedChunk, b *builtStripes, maxReplica uint64) {
	m.topo.Lock()
	defer m.topo.Unlock()
	m.tenantsMu.Lock()
	for k, t := range st.tenants {
		m.tenants[k] = t
	}
	m.tenantsMu.Unlock()
	m.clientsMu.Lock()
	for k, c := range st.clients {
		m.clients[k] = c
	}
	m.clientsMu.Unlock()
	m.groupsMu.Lock()
	for k, g := range st.groups {
		m.groups[k] = g
	}
	m.groupsMu.Unlock()
	for id, s := range segs {
		m.segments[id] = s
	}
	for i := range m.stripes {
		sp := &m.stripes[i]
		sp.mu.Lock()
		m.preserve(sp)
		if len(sp.objects) == 0 {
			sp.objects = b.maps[i]
		} else {
			for k, o := range b.maps[i] {
				sp.objects[k] = o
			}
		}
		sp.mu.Unlock()
	}
	for t, v := range b.used {
		t.used.Add(v.bytes)
		t.objects.Add(v.objects)
	}
	for s, v := range b.replicas {
		s.replicas.Add(v)
	}
	for c := range dec {
		for _, o := range dec[c].objs {
			if o.group != nil {
				m.join(o.group, o)
			}
		}
	}
	if maxReplica > m.nextReplicaID.Load() {
		m.nextReplicaID.Store(maxReplica)
	}
}

// readFleet decodes the fleet file; a snapshot without one restores an
// empty table. Every record is checked as the log's entries are.
func readFleet(files map[string]string, man SnapshotManifest) ([]*masterv1.NodeRecord, []*masterv1.ShardAssignment, error) {
	if _, ok := files[snapshotFleetFile]; !ok {
		return nil, nil, nil
	}
	b, err := readPayload(files, snapshotFleetFile, nil)
	if err != nil {
		return nil, nil, err
	}
	r := snapcodec.NewDecoder(b)
	n := decodeHeader(&r, man, snapshotFleetFile)
	var nodes []*masterv1.NodeRecord
	var assigns []*masterv1.ShardAssignment
	for i := 0; i < n && r.Err == nil; i++ {
		r.Arr(2)
		kind := r.Uint()
		body := r.Bytes()
		if r.Err != nil {
			break
		}
		switch kind {
		case fleetRecordNode:
			var rec masterv1.NodeRecord
			if err := proto.Unmarshal(body, &rec); err != nil {
				return nil, nil, fmt.Errorf("record %d: %v", i, err)
			}
			if err := checkEntry(OpNode, &masterv1.OplogEntry{Node: &rec}); err != nil {
				return nil, nil, fmt.Errorf("record %d: %v", i, err)
			}
			nodes = append(nodes, &rec)
		case fleetRecordShard:
			var a masterv1.ShardAssignment
			if err := proto.Unmarshal(body, &a); err != nil {
				return nil, nil, fmt.Errorf("record %d: %v", i, err)
			}
			if err := checkEntry(OpAssignShard, &masterv1.OplogEntry{Shard: &a}); err != nil {
				return nil, nil, fmt.Errorf("record %d: %v", i, err)
			}
			assigns = append(assigns, &a)
		default:
			r.Fail("record %d of kind %d", i, kind)
		}
	}
	r.End()
	return nodes, assigns, r.Err
}

// readSnapshotFile reads a small snapshot file whole.
func readSnapshotFile(files map[string]string, name string, limit int64) ([]byte, error) {
	path, ok := files[name]
	if !ok {
		return nil, fmt.Errorf("file %q missing", name)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("file %q larger than %d bytes", name, limit)
	}
	return b, nil
}

// readPayload reads a payload file whole, into buf when it fits (a
// decoding worker reuses one buffer for all its chunks).
func readPayload(files map[string]string, name string, buf []byte) ([]byte, error) {
	path, ok := files[name]
	if !ok {
		return nil, fmt.Errorf("file %q missing", name)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > math.MaxInt32 {
		return nil, fmt.Errorf("file %q of %d bytes", name, st.Size())
	}
	if int64(cap(buf)) < st.Size() {
		buf = make([]byte, st.Size())
	}
	buf = buf[:st.Size()]
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// decodeHeader checks a payload file's header against the manifest and returns
// its record count.
func decodeHeader(r *snapcodec.Decoder, m SnapshotManifest, part string) int {
	r.Arr(5)
	format, version, id, got := r.StrBytes(), r.StrBytes(), r.StrBytes(), r.StrBytes()
	n := r.Uint()
	switch {
	case r.Err != nil:
	case string(format) != payloadFormat:
		r.Fail("not a master snapshot payload (%q)", trunc(string(format)))
	case string(version) != m.Version:
		r.Fail("payload of version %q under a %s manifest: its time fields are in another domain", trunc(string(version)), m.Version)
	case string(id) != m.ID:
		r.Fail("payload of snapshot %q under manifest %q", trunc(string(id)), m.ID)
	case string(got) != part:
		r.Fail("payload says it is %q", trunc(string(got)))
	case n > snapcodec.MaxRecordLen:
		r.Fail("%d records", n)
	}
	return int(n)
}
