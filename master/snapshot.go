package master

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"google.golang.org/protobuf/proto"

	masterv1 "github.com/shardfence/shardfence/api/master/v1"
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

// Snapshot is a frozen copy of the master state, taken by Freeze and
// encoded outside every lock.
type Snapshot struct {
	Clock ClockPair // (S0, C0), captured while frozen
	// Pause is how long the freeze held every logged change back; reads
	// never waited.
	Pause time.Duration
	// Copy is how long copying the objects took (changes went on, each
	// shard's first change after the freeze copying that shard first).
	Copy     time.Duration
	segments []snapSegment
	parts    []snapPart // one per metadata shard
	nodes    []*masterv1.NodeRecord
	fleet    []*masterv1.ShardAssignment
}

// snapPart is one metadata shard's objects as they were at the freeze.
type snapPart struct {
	objects  []snapObject
	replicas []snapReplica
}

type snapSegment struct {
	id, base, size uint64
	name, client   string
	endpoint       string
	serving        bool
}

type snapObject struct {
	key                        string
	tenant, client, group      string
	size                       uint64
	seq                        uint64
	lease, softPin             SteadyTime
	putStart                   int64
	dataType                   uint32
	hardPinned, softPinEnabled bool
	firstReplica, nReplicas    uint32
}

type snapReplica struct {
	id, segment, offset, size uint64
	kind                      ReplicaKind
	status                    ReplicaStatus
}

// snapshotCopy is a snapshot whose shards are still being copied.
type snapshotCopy struct {
	parts []snapPart
	// copied[i] is guarded by shard i's lock: the copier takes it shared,
	// a change exclusively, so exactly one of them copies the shard.
	copied []bool
}

// Objects is the number of objects frozen.
func (s *Snapshot) Objects() int {
	n := 0
	for i := range s.parts {
		n += len(s.parts[i].objects)
	}
	return n
}

// Freeze copies the whole state as it was at one instant, without
// stopping reads and holding changes back only for an instant:
//
//  1. take the topology lock exclusively, which every logged change holds
//     shared: no change is in progress, and none starts;
//  2. call cut (the operation log ends a batch there, so the snapshot is
//     exactly the log up to that point), capture the clock pair (S0, C0)
//     once, copy the segments, and mark every metadata shard as owed to
//     the snapshot; release the lock (the pause ends here);
//  3. copy the shards one by one under their read lock. A change to a
//     shard not copied yet copies it first, under its write lock
//     (preserve), so every shard is copied as it was at the freeze.
//
// Lease deadlines are read as the copy meets them: a read lease granted
// since the freeze may show, which only keeps an object longer.
func (m *Master) Freeze(cut func()) *Snapshot {
	s, c := m.freeze(cut)
	m.copyShards(s, c)
	return s
}

// freeze is steps 1 and 2 of Freeze.
func (m *Master) freeze(cut func()) (*Snapshot, *snapshotCopy) {
	start := time.Now()
	m.topo.Lock()
	if cut != nil {
		cut()
	}
	s := &Snapshot{Clock: m.clockPair()}
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
	c := &snapshotCopy{parts: make([]snapPart, len(m.shards)), copied: make([]bool, len(m.shards))}
	m.cow.Store(c)
	m.topo.Unlock()
	s.Pause = time.Since(start)
	sort.Slice(s.segments, func(i, j int) bool { return s.segments[i].id < s.segments[j].id })
	return s, c
}

// copyShards is step 3 of Freeze.
func (m *Master) copyShards(s *Snapshot, c *snapshotCopy) {
	copyStart := time.Now()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		if !c.copied[i] {
			c.parts[i] = copyShard(sh)
			c.copied[i] = true
		}
		sh.mu.RUnlock()
	}
	m.cow.Store(nil)
	s.parts = c.parts
	s.Copy = time.Since(copyStart)
}

// preserve copies sh into the snapshot being taken, if it has not been
// yet, before the change the caller is about to make. The caller holds
// sh.mu exclusively.
func (m *Master) preserve(sh *shard) {
	c := m.cow.Load()
	if c == nil || c.copied[sh.idx] {
		return
	}
	c.parts[sh.idx] = copyShard(sh)
	c.copied[sh.idx] = true
}

// copyShard copies one shard's objects. The caller holds its lock.
func copyShard(sh *shard) snapPart {
	p := snapPart{objects: make([]snapObject, 0, len(sh.objects))}
	n := 0
	for _, o := range sh.objects {
		n += len(o.replicas)
	}
	p.replicas = make([]snapReplica, 0, n)
	for _, o := range sh.objects {
		so := snapObject{
			key: o.key, tenant: o.tenant.name, client: o.client.id, size: o.size, seq: o.seq,
			lease: o.leaseDeadline(), softPin: SteadyTime(o.softPin.Load()), putStart: o.putStart,
			dataType: o.dataType, hardPinned: o.hardPinned, softPinEnabled: o.softPinEnabled,
			firstReplica: uint32(len(p.replicas)), nReplicas: uint32(len(o.replicas)),
		}
		if o.group != nil {
			so.group = o.group.key.id
		}
		for j := range o.replicas {
			rp := &o.replicas[j]
			sr := snapReplica{id: rp.id, offset: rp.offset, size: rp.size, kind: rp.kind, status: rp.status}
			if rp.seg != nil {
				sr.segment = rp.seg.id
			}
			p.replicas = append(p.replicas, sr)
		}
		p.objects = append(p.objects, so)
	}
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

// WriteFiles encodes the snapshot under dir in the given format and
// returns its files, the manifest first. id names the snapshot.
func (s *Snapshot) WriteFiles(dir string, format SnapshotFormat, id string) ([]SnapshotFile, error) {
	man := SnapshotManifest{Version: format.version(), ID: id}
	if format == SnapshotV2 {
		man.Clock = s.Clock
	}
	line, err := FormatSnapshotManifest(man)
	if err != nil {
		return nil, err
	}
	var files []SnapshotFile
	write := func(name string, fill func(e *msgpack.Encoder) error) error {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		e := msgpack.NewEncoder(bw)
		err = fill(e)
		if err == nil {
			err = bw.Flush()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("snapshot %q file %q: %w", id, name, err)
		}
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		files = append(files, SnapshotFile{Name: name, Path: path, Size: st.Size()})
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, SnapshotManifestFile), []byte(line), 0o644); err != nil {
		return nil, err
	}
	files = append(files, SnapshotFile{Name: SnapshotManifestFile, Path: filepath.Join(dir, SnapshotManifestFile), Size: int64(len(line))})
	total := s.Objects()
	chunks := (total + ObjectsPerChunk - 1) / ObjectsPerChunk
	err = write(snapshotSegmentsFile, func(e *msgpack.Encoder) error {
		w := encoder{e: e}
		w.header(man, snapshotSegmentsFile, len(s.segments))
		w.uint(uint64(chunks))
		w.uint(uint64(total))
		for _, sg := range s.segments {
			w.arr(7)
			w.uint(sg.id)
			w.str(sg.name)
			w.str(sg.client)
			w.uint(sg.base)
			w.uint(sg.size)
			w.str(sg.endpoint)
			w.bool(sg.serving)
		}
		return w.err
	})
	if err != nil {
		return nil, err
	}
	err = write(snapshotFleetFile, func(e *msgpack.Encoder) error {
		w := encoder{e: e}
		w.header(man, snapshotFleetFile, len(s.nodes)+len(s.fleet))
		for _, n := range s.nodes {
			w.fleetRecord(fleetRecordNode, n)
		}
		for _, a := range s.fleet {
			w.fleetRecord(fleetRecordShard, a)
		}
		return w.err
	})
	if err != nil {
		return nil, err
	}
	part, next := 0, 0 // where the next object to encode is
	for c := 0; c < chunks; c++ {
		count := min(ObjectsPerChunk, total-c*ObjectsPerChunk)
		err := write(chunkName(c), func(e *msgpack.Encoder) error {
			w := encoder{e: e}
			w.header(man, chunkName(c), count)
			for i := 0; i < count; i++ {
				for next == len(s.parts[part].objects) {
					part, next = part+1, 0
				}
				p := &s.parts[part]
				if err := s.encodeObject(&w, p, &p.objects[next], format); err != nil {
					return err
				}
				next++
			}
			return w.err
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

func chunkName(c int) string { return fmt.Sprintf("%s%06d", snapshotObjectsFile, c) }

// encodeObject writes one object record: 13 fields, the deadlines in the
// format's domain.
func (s *Snapshot) encodeObject(w *encoder, p *snapPart, o *snapObject, format SnapshotFormat) error {
	w.arr(13)
	w.str(o.tenant)
	w.str(o.key)
	w.str(o.client)
	w.uint(o.size)
	w.uint(uint64(o.dataType))
	w.str(o.group)
	w.bool(o.hardPinned)
	w.bool(o.softPinEnabled)
	lease, soft := int64(o.lease), int64(o.softPin)
	if format == SnapshotV1 {
		var err error
		if lease, err = legacyWallMS(o.lease, s.Clock); err != nil {
			return err
		}
		if o.softPin != 0 {
			if soft, err = legacyWallMS(o.softPin, s.Clock); err != nil {
				return err
			}
		}
	}
	w.int(lease)
	if o.softPin == 0 {
		w.nil()
	} else {
		w.int(soft)
	}
	w.int(o.putStart)
	w.uint(o.seq)
	reps := p.replicas[o.firstReplica : o.firstReplica+o.nReplicas]
	w.arr(len(reps))
	for _, r := range reps {
		w.arr(6)
		w.uint(r.id)
		w.uint(uint64(r.kind))
		w.uint(uint64(r.status))
		w.uint(r.segment)
		w.uint(r.offset)
		w.uint(r.size)
	}
	return nil
}

// encoder keeps the first error of a run of msgpack writes.
type encoder struct {
	e   *msgpack.Encoder
	err error
}

func (w *encoder) do(err error) {
	if w.err == nil {
		w.err = err
	}
}
func (w *encoder) arr(n int)     { w.do(w.e.EncodeArrayLen(n)) }
func (w *encoder) str(s string)  { w.do(w.e.EncodeString(s)) }
func (w *encoder) uint(v uint64) { w.do(w.e.EncodeUint(v)) }
func (w *encoder) int(v int64)   { w.do(w.e.EncodeInt(v)) }
func (w *encoder) bool(v bool)   { w.do(w.e.EncodeBool(v)) }
func (w *encoder) nil()          { w.do(w.e.EncodeNil()) }

// Fleet records: [kind, protobuf body].
const (
	fleetRecordNode  = 1
	fleetRecordShard = 2
)

func (w *encoder) fleetRecord(kind uint64, msg proto.Message) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	w.do(err)
	w.arr(2)
	w.uint(kind)
	w.do(w.e.EncodeBytes(b))
}

// header opens a payload file: [format, version, id, part, count].
func (w *encoder) header(m SnapshotManifest, part string, count int) {
	w.arr(5)
	w.str(payloadFormat)
	w.str(m.Version)
	w.str(m.ID)
	w.str(part)
	w.uint(uint64(count))
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
	// Segments.
	d, closeFile, err := openPayload(files, snapshotSegmentsFile)
	if err != nil {
		return bad(snapshotSegmentsFile, ErrSnapshotPayload, "%v", err)
	}
	defer closeFile()
	r := decoder{d: d}
	nsegs := r.header(man, snapshotSegmentsFile)
	chunks, total := r.uint(), r.uint()
	segs := map[uint64]*segment{}
	for i := 0; i < nsegs && r.err == nil; i++ {
		r.arr(7)
		sg := &segment{id: r.uint(), name: r.str(), client: st.client(r.str()), base: r.uint(), size: r.uint(), state: segmentAwaitingRemount}
		_ = r.str() // the endpoint: a remount proves a new one
		_ = r.bool()
		switch {
		case r.err != nil:
		case sg.id == 0 || sg.size == 0 || sg.client.id == "" || sg.base+sg.size < sg.base:
			r.fail("segment %d: needs an id, a size and a client", sg.id)
		case segs[sg.id] != nil:
			r.fail("segment %d listed twice", sg.id)
		}
		segs[sg.id] = sg
	}
	r.end()
	if r.err != nil {
		return bad(snapshotSegmentsFile, ErrSnapshotPayload, "%v", r.err)
	}
	if chunks > math.MaxInt32 || total > uint64(chunks)*ObjectsPerChunk {
		return bad(snapshotSegmentsFile, ErrSnapshotPayload, "%d objects in %d files", total, chunks)
	}
	// Objects, every chunk decoded and checked before any is installed.
	type key = objectKey
	seen := make(map[key]struct{}, min(total, 1<<24))
	var objs []*object
	var maxReplica uint64
	for c := 0; c < int(chunks); c++ {
		if err := ctx.Err(); err != nil {
			return bad("", err, "restore interrupted")
		}
		name := chunkName(c)
		d, closeChunk, err := openPayload(files, name)
		if err != nil {
			return bad(name, ErrSnapshotPayload, "%v", err)
		}
		r := decoder{d: d}
		n := r.header(man, name)
		if r.err == nil && (n > ObjectsPerChunk || (c < int(chunks)-1 && n != ObjectsPerChunk)) {
			r.fail("%d objects in a chunk (every chunk but the last holds %d)", n, ObjectsPerChunk)
		}
		for i := 0; i < n && r.err == nil; i++ {
			o, err := st.decodeObject(&r, man, segs, now)
			if err != nil {
				closeChunk()
				return bad(name, ErrClockConversion, "object %d: %v", i, err)
			}
			if r.err != nil {
				break
			}
			k := key{o.tenant.name, o.key}
			if _, dup := seen[k]; dup {
				r.fail("object (%q, %q) listed twice", k.tenant, k.key)
				break
			}
			seen[k] = struct{}{}
			if len(o.replicas) == 0 {
				res.Dropped++
				continue
			}
			for _, rp := range o.replicas {
				maxReplica = max(maxReplica, rp.id)
			}
			if m.cfg.SnapshotRestoreCleanup && !o.hardPinned && o.leaseExpired(now.Steady) && !o.softPinActive(now.Steady) {
				res.Cleaned++
				continue
			}
			if o.leaseExpired(now.Steady) {
				res.Expired++
			}
			objs = append(objs, o)
		}
		r.end()
		closeChunk()
		if r.err != nil {
			return bad(name, ErrSnapshotPayload, "%v", r.err)
		}
	}
	if uint64(len(seen)) != total {
		return bad(snapshotSegmentsFile, ErrSnapshotPayload, "the segments file counts %d objects, the chunks hold %d", total, len(seen))
	}
	if extra := fmt.Sprintf("%s%06d", snapshotObjectsFile, chunks); files[extra] != "" {
		return bad(extra, ErrSnapshotPayload, "a chunk past the %d the segments file counts", chunks)
	}
	if err := checkRanges(segs, objs); err != nil {
		return bad("", ErrSnapshotPayload, "%v", err)
	}
	nodes, assigns, err := readFleet(files, man)
	if err != nil {
		return bad(snapshotFleetFile, ErrSnapshotPayload, "%v", err)
	}
	m.install(st, segs, objs, maxReplica)
	m.fleet.install(nodes, assigns)
	res.Segments, res.Objects = len(segs), len(objs)
	return res, nil
}

// restoreState holds the tenants, clients and groups a restore creates,
// apart from the master until the whole snapshot is accepted.
type restoreState struct {
	tenants map[string]*tenant
	clients map[string]*client
	groups  map[groupKey]*group
	quotas  map[string]uint64
}

func (st *restoreState) tenant(name string) *tenant {
	t := st.tenants[name]
	if t == nil {
		t = &tenant{name: name, quota: st.quotas[name]}
		st.tenants[name] = t
	}
	return t
}

func (st *restoreState) client(id string) *client {
	c := st.clients[id]
	if c == nil {
		c = &client{id: id}
		st.clients[id] = c
	}
	return c
}

func (st *restoreState) group(k groupKey) *group {
	g := st.groups[k]
	if g == nil {
		g = &group{key: k}
		st.groups[k] = g
	}
	return g
}

// decodeObject reads one object record and converts its deadlines. A
// malformed record is r.err; a conversion failure is returned.
func (st *restoreState) decodeObject(r *decoder, man SnapshotManifest, segs map[uint64]*segment, now ClockPair) (*object, error) {
	r.arr(13)
	tenant, key, client := r.str(), r.str(), r.str()
	o := &object{key: key, size: r.uint()}
	dt := r.uint()
	group := r.str()
	o.hardPinned, o.softPinEnabled = r.bool(), r.bool()
	lease := r.int()
	soft, hasSoft := r.optInt()
	o.putStart = r.int()
	o.seq = r.uint()
	nrep := r.arrLen()
	if r.err != nil {
		return o, nil
	}
	switch {
	case key == "" || len(key) > maxKeyLen || len(tenant) > maxKeyLen:
		r.fail("key of %d bytes, tenant of %d (keys are 1 to %d bytes)", len(key), len(tenant), maxKeyLen)
	case client == "":
		r.fail("object (%q, %q) without a client", tenant, key)
	case dt > math.MaxUint32:
		r.fail("data type %d", dt)
	case nrep > maxReplicas:
		r.fail("%d replicas", nrep)
	}
	if r.err != nil {
		return o, nil
	}
	o.dataType = uint32(dt)
	var err error
	if man.Version == SnapshotVersion1 {
		var l, s SteadyTime
		if l, err = convertV1(lease, now); err == nil && hasSoft {
			s, err = convertV1(soft, now)
		}
		o.lease.Store(int64(l))
		o.softPin.Store(int64(s))
	} else {
		var l, s SteadyTime
		if l, err = convertV2(SteadyTime(lease), man.Clock, now); err == nil && hasSoft {
			s, err = convertV2(SteadyTime(soft), man.Clock, now)
		}
		o.lease.Store(int64(l))
		o.softPin.Store(int64(s))
	}
	if err != nil {
		return nil, fmt.Errorf("object (%q, %q): %w", tenant, key, err)
	}
	o.replicas = make([]replica, 0, nrep)
	for j := 0; j < nrep && r.err == nil; j++ {
		r.arr(6)
		rp := replica{id: r.uint(), handle: noNode}
		kind, status := r.uint(), r.uint()
		seg, off, size := r.uint(), r.uint(), r.uint()
		if r.err != nil {
			break
		}
		rp.kind, rp.status, rp.offset, rp.size = ReplicaKind(kind), ReplicaStatus(status), off, size
		switch {
		case kind != uint64(MemoryReplica) && kind != uint64(DiskReplica):
			r.fail("object (%q, %q): replica %d of kind %d", tenant, key, rp.id, kind)
		case status < uint64(ReplicaProcessing) || status > uint64(ReplicaFailed):
			r.fail("object (%q, %q): replica %d of status %d", tenant, key, rp.id, status)
		case rp.kind == MemoryReplica && segs[seg] == nil:
			r.fail("object (%q, %q): replica %d on segment %d, which the snapshot does not describe", tenant, key, rp.id, seg)
		case rp.kind == MemoryReplica && (size == 0 || off+size < off):
			r.fail("object (%q, %q): replica %d range %d+%d", tenant, key, rp.id, off, size)
		}
		if rp.status != ReplicaComplete {
			continue // in progress or gone: not recoverable, hard pin or not
		}
		if rp.kind == MemoryReplica {
			rp.seg = segs[seg]
		}
		o.replicas = append(o.replicas, rp)
	}
	if r.err == nil {
		o.tenant, o.client = st.tenant(tenant), st.client(client)
		if group != "" {
			o.group = st.group(groupKey{tenant, group})
		}
	}
	return o, nil
}

// checkRanges refuses replicas that leave their segment or overlap: the
// remount would refuse them later, after the snapshot had been accepted.
func checkRanges(segs map[uint64]*segment, objs []*object) error {
	type ext struct{ off, end uint64 }
	per := map[*segment][]ext{}
	for _, o := range objs {
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
	for s, es := range per {
		sort.Slice(es, func(i, j int) bool { return es[i].off < es[j].off })
		for i := 1; i < len(es); i++ {
			if es[i].off < es[i-1].end {
				return fmt.Errorf("segment %d: replicas at %d and %d overlap", s.id, es[i-1].off, es[i].off)
			}
		}
	}
	return nil
}

// empty reports whether m holds no object and no segment.
func (m *Master) empty() bool {
	m.topo.RLock()
	defer m.topo.RUnlock()
	if len(m.segments) > 0 {
		return false
	}
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		n := len(sh.objects)
		sh.mu.RUnlock()
		if n > 0 {
			return false
		}
	}
	return true
}

// install puts decoded segments and objects in place. Nothing is logged:
// a restore rebuilds what the log (and the snapshot) already hold.
func (m *Master) install(st *restoreState, segs map[uint64]*segment, objs []*object, maxReplica uint64) {
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
	for _, o := range objs {
		sh := m.shardFor(o.tenant.name, o.key)
		sh.mu.Lock()
		m.preserve(sh)
		sh.objects[objectKey{o.tenant.name, o.key}] = o
		countReplicas(o.replicas, 1)
		o.tenant.used.Add(o.memoryBytes())
		o.tenant.objects.Add(1)
		sh.mu.Unlock()
		if o.group != nil {
			m.join(o.group, o)
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
	d, closeFile, err := openPayload(files, snapshotFleetFile)
	if err != nil {
		return nil, nil, err
	}
	defer closeFile()
	r := decoder{d: d}
	n := r.header(man, snapshotFleetFile)
	var nodes []*masterv1.NodeRecord
	var assigns []*masterv1.ShardAssignment
	for i := 0; i < n && r.err == nil; i++ {
		r.arr(2)
		kind := r.uint()
		body := r.bytes()
		if r.err != nil {
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
			r.fail("record %d of kind %d", i, kind)
		}
	}
	r.end()
	return nodes, assigns, r.err
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

func openPayload(files map[string]string, name string) (*msgpack.Decoder, func(), error) {
	path, ok := files[name]
	if !ok {
		return nil, nil, fmt.Errorf("file %q missing", name)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReaderSize(f, 1<<20)
	return msgpack.NewDecoder(br), func() { _ = f.Close() }, nil
}

// decoder reads msgpack strictly: a nil where a value must be, a negative
// number where a count or size must be, or a value of another type is an
// error, never a zero.
type decoder struct {
	d   *msgpack.Decoder
	err error
}

func (r *decoder) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *decoder) code() (byte, bool) {
	if r.err != nil {
		return 0, false
	}
	c, err := r.d.PeekCode()
	if err != nil {
		r.fail("truncated: %v", err)
		return 0, false
	}
	if c == msgpcode.Nil {
		r.fail("nil where a value is required")
		return 0, false
	}
	return c, true
}

func (r *decoder) arrLen() int {
	if _, ok := r.code(); !ok {
		return 0
	}
	n, err := r.d.DecodeArrayLen()
	if err != nil {
		r.fail("%v", err)
		return 0
	}
	return n
}

func (r *decoder) arr(want int) {
	if n := r.arrLen(); r.err == nil && n != want {
		r.fail("a record of %d fields, want %d", n, want)
	}
}

func (r *decoder) str() string {
	c, ok := r.code()
	if !ok {
		return ""
	}
	if !msgpcode.IsString(c) {
		r.fail("code %#x where a string is required", c)
		return ""
	}
	s, err := r.d.DecodeString()
	if err != nil {
		r.fail("%v", err)
	}
	return s
}

func (r *decoder) uint() uint64 {
	c, ok := r.code()
	if !ok {
		return 0
	}
	if c == msgpcode.Uint64 {
		v, err := r.d.DecodeUint64()
		if err != nil {
			r.fail("%v", err)
		}
		return v
	}
	v := r.int()
	if r.err == nil && v < 0 {
		r.fail("negative value %d where a count or size is required", v)
	}
	return uint64(v)
}

func (r *decoder) int() int64 {
	c, ok := r.code()
	if !ok {
		return 0
	}
	if !msgpcode.IsFixedNum(c) && (c < msgpcode.Uint8 || c > msgpcode.Int64) {
		r.fail("code %#x where an integer is required", c)
		return 0
	}
	if c == msgpcode.Uint64 {
		v, err := r.d.DecodeUint64()
		if err == nil && v > math.MaxInt64 {
			r.fail("%d does not fit a signed 64-bit integer", v)
		}
		return int64(v)
	}
	v, err := r.d.DecodeInt64()
	if err != nil {
		r.fail("%v", err)
	}
	return v
}

// optInt reads an integer or nil (absent).
func (r *decoder) optInt() (int64, bool) {
	if r.err != nil {
		return 0, false
	}
	c, err := r.d.PeekCode()
	if err != nil {
		r.fail("truncated: %v", err)
		return 0, false
	}
	if c == msgpcode.Nil {
		_ = r.d.DecodeNil()
		return 0, false
	}
	return r.int(), true
}

func (r *decoder) bytes() []byte {
	c, ok := r.code()
	if !ok {
		return nil
	}
	if !msgpcode.IsBin(c) {
		r.fail("code %#x where bytes are required", c)
		return nil
	}
	b, err := r.d.DecodeBytes()
	if err != nil {
		r.fail("%v", err)
	}
	return b
}

func (r *decoder) bool() bool {
	c, ok := r.code()
	if !ok {
		return false
	}
	if c != msgpcode.True && c != msgpcode.False {
		r.fail("code %#x where a boolean is required", c)
		return false
	}
	v, err := r.d.DecodeBool()
	if err != nil {
		r.fail("%v", err)
	}
	return v
}

// header checks a payload file's header against the manifest and returns
// its record count.
func (r *decoder) header(m SnapshotManifest, part string) int {
	r.arr(5)
	format, version, id, got := r.str(), r.str(), r.str(), r.str()
	n := r.uint()
	switch {
	case r.err != nil:
	case format != payloadFormat:
		r.fail("not a master snapshot payload (%q)", trunc(format))
	case version != m.Version:
		r.fail("payload of version %q under a %s manifest: its time fields are in another domain", trunc(version), m.Version)
	case id != m.ID:
		r.fail("payload of snapshot %q under manifest %q", trunc(id), m.ID)
	case got != part:
		r.fail("payload says it is %q", trunc(got))
	case n > math.MaxInt32:
		r.fail("%d records", n)
	}
	return int(n)
}

// end checks nothing follows the last record.
func (r *decoder) end() {
	if r.err != nil {
		return
	}
	if _, err := r.d.PeekCode(); err == nil {
		r.fail("bytes after the last record")
	} else if !errors.Is(err, io.EOF) {
		r.fail("%v", err)
	}
}
