// Package cost estimates what a shard costs a month on an object store: the
// requests its syncs, fence checks and checkpoints send, priced by the
// store's request classes, and the bytes it keeps. It is a pure model (no
// I/O): `shardfence cost` feeds it a workload, or a live sidecar's counters,
// and a price table.
//
// The formula, in words: a month (730 hours) of syncs, times the requests
// each sync sends in the shard's fencing mode, plus the fence CASes a lease
// renews (at most one per lease interval), plus a data object per sync whose
// payload does not fit inline, plus each checkpoint's files, manifest and
// GC listings; write-class requests at the PUT price and read-class ones at
// the GET price; plus the bytes kept (the checkpoint and the translog since
// it) at the storage price.
package cost

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Month is the month providers bill by: 730 hours.
const Month = 730 * time.Hour

// GiB is the GB providers bill storage by.
const GiB = 1 << 30

// Price is one provider's storage class.
type Price struct {
	Provider          string  `json:"provider"`
	Class             string  `json:"class"`
	Region            string  `json:"region"`
	PutPer1k          float64 `json:"put_per_1k"`           // PUT-class: writes and LIST
	GetPer1k          float64 `json:"get_per_1k"`           // GET-class: GET and HEAD
	StoragePerGBMonth float64 `json:"storage_per_gb_month"` // per GiB-month
	Source            string  `json:"source"`
	Notes             string  `json:"notes,omitempty"`
}

// Name is provider/class.
func (p Price) Name() string { return p.Provider + "/" + p.Class }

// Table is a price table: prices.json, or a file in its format.
type Table struct {
	Comment string  `json:"comment"`
	Date    string  `json:"date"`
	Prices  []Price `json:"prices"`
}

//go:embed prices.json
var defaultTable []byte

// DefaultTable is the table built into the binary (prices.json).
func DefaultTable() Table {
	t, err := ParseTable(defaultTable)
	if err != nil {
		panic(fmt.Sprintf("cost: the built-in prices.json does not parse: %v", err))
	}
	return t
}

// ParseTable reads a table in prices.json's format, refusing unknown
// fields, negative prices and a table without a date or a source per row.
func ParseTable(b []byte) (Table, error) {
	var t Table
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Table{}, fmt.Errorf("price table: %w", err)
	}
	if t.Date == "" || len(t.Prices) == 0 {
		return Table{}, errors.New("price table: needs a date and at least one price")
	}
	seen := map[string]bool{}
	for _, p := range t.Prices {
		switch {
		case p.Provider == "" || p.Class == "":
			return Table{}, fmt.Errorf("price table: a row without provider or class: %+v", p)
		case p.PutPer1k < 0 || p.GetPer1k < 0 || p.StoragePerGBMonth < 0:
			return Table{}, fmt.Errorf("price table: %s has a negative price", p.Name())
		case p.Source == "":
			return Table{}, fmt.Errorf("price table: %s names no source", p.Name())
		case seen[p.Name()]:
			return Table{}, fmt.Errorf("price table: %s twice", p.Name())
		}
		seen[p.Name()] = true
	}
	return t, nil
}

// Find is the row of provider and class.
func (t Table) Find(provider, class string) (Price, error) {
	var names []string
	for _, p := range t.Prices {
		if p.Provider == provider && p.Class == class {
			return p, nil
		}
		names = append(names, p.Name())
	}
	return Price{}, fmt.Errorf("no price for %s/%s in the table (it has %v)", provider, class, names)
}

// Mode is a fencing mode, or unfenced for reference.
type Mode string

const (
	PerSync    Mode = "per_sync"
	Observe    Mode = "observe"
	Lease      Mode = "lease"
	CreateOnly Mode = "create_only"
	Unfenced   Mode = "unfenced"
)

// Modes are every mode, safest first.
func Modes() []Mode { return []Mode{PerSync, Observe, Lease, CreateOnly, Unfenced} }

// CreateOnlyCheckEvery is how many syncs a create-only writer starts per
// fence key read: half its check window (translog's CheckWindow of 8).
const CreateOnlyCheckEvery = 4

// CheckpointLists is the LIST requests the GC after a checkpoint sends (an
// estimate: the translog's md and data prefixes and the checkpoints).
const CheckpointLists = 3

// Requests are one sync's requests by price class, and where the numbers
// come from.
type Requests struct {
	Put, Get float64
	Source   string
}

// Protocol is what one sync of mode sends, from the protocol
// (docs/PROTOCOL.md): per_sync and observe an md create and a fence CAS;
// create_only the md create and a fence key read every
// CreateOnlyCheckEvery syncs; lease the md create, its CASes counted per
// lease interval by Cost; unfenced the md create alone.
func Protocol(m Mode) Requests {
	switch m {
	case PerSync, Observe:
		return Requests{Put: 2, Source: "protocol: md create + fence CAS"}
	case CreateOnly:
		return Requests{Put: 1, Get: 1.0 / CreateOnlyCheckEvery, Source: fmt.Sprintf("protocol: md create; a fence key GET every %d syncs", CreateOnlyCheckEvery)}
	case Lease:
		return Requests{Put: 1, Source: "protocol: md create; one CAS per lease interval"}
	}
	return Requests{Put: 1, Source: "protocol: md create"}
}

// Workload is one shard's load.
type Workload struct {
	SyncsPerSecond  float64
	BytesPerSecond  float64       // op payload written
	CheckpointEvery time.Duration // 0: no checkpoints (storage then grows by a month of writes)
	CheckpointBytes int64         // size of one checkpoint
	CheckpointFiles int           // files in one checkpoint, one PUT each
	LeaseInterval   time.Duration // lease mode's
	InlineLimit     int64         // payloads up to this go inside the md object
}

// Estimate is one mode's month.
type Estimate struct {
	Mode                     Mode
	Requests                 Requests // per sync
	PutPerMonth, GetPerMonth float64
	LeaseCASPerMonth         float64 // lease: the CASes among PutPerMonth
	DataPutsPerMonth         float64 // data objects of payloads above the inline limit
	CheckpointPutsPerMonth   float64 // checkpoint files, manifests and GC listings
	StorageGiB               float64
	RequestUSD, StorageUSD   float64
	TotalUSD                 float64
}

// Cost prices a month of w in mode m, whose syncs send per.
func Cost(w Workload, m Mode, per Requests, p Price) Estimate {
	secs := Month.Seconds()
	syncs := w.SyncsPerSecond * secs
	e := Estimate{Mode: m, Requests: per, PutPerMonth: per.Put * syncs, GetPerMonth: per.Get * syncs}
	if m == Lease && w.SyncsPerSecond > 0 && w.LeaseInterval > 0 {
		// Renewed only once the lease ran out: at most one CAS an
		// interval while syncs keep coming, one per sync when they are
		// sparser than that.
		e.LeaseCASPerMonth = math.Min(w.SyncsPerSecond, 1/w.LeaseInterval.Seconds()) * secs
		e.PutPerMonth += e.LeaseCASPerMonth
	}
	if w.SyncsPerSecond > 0 && w.BytesPerSecond/w.SyncsPerSecond > float64(w.InlineLimit) {
		e.DataPutsPerMonth = syncs
		e.PutPerMonth += syncs
	}
	kept := w.BytesPerSecond * secs
	if w.CheckpointEvery > 0 {
		if w.SyncsPerSecond > 0 {
			n := secs / w.CheckpointEvery.Seconds()
			e.CheckpointPutsPerMonth = n * float64(w.CheckpointFiles+1+CheckpointLists)
			e.PutPerMonth += e.CheckpointPutsPerMonth
		}
		kept = math.Min(kept, w.BytesPerSecond*w.CheckpointEvery.Seconds())
	}
	e.StorageGiB = (float64(w.CheckpointBytes) + kept) / GiB
	e.RequestUSD = e.PutPerMonth/1000*p.PutPer1k + e.GetPerMonth/1000*p.GetPer1k
	e.StorageUSD = e.StorageGiB * p.StoragePerGBMonth
	e.TotalUSD = e.RequestUSD + e.StorageUSD
	return e
}

// MaxSyncsPerSecond is the highest sync rate at which a month of w in mode
// m stays within budget dollars (w's other figures fixed), found by
// bisection: 0 when even an idle shard exceeds it, +Inf when none does up
// to a million syncs a second.
func MaxSyncsPerSecond(w Workload, m Mode, per Requests, p Price, budget float64) float64 {
	at := func(s float64) float64 {
		w.SyncsPerSecond = s
		return Cost(w, m, per, p).TotalUSD
	}
	const top = 1e6
	if at(top) <= budget {
		return math.Inf(1)
	}
	if at(0) > budget {
		return 0
	}
	lo, hi := 0.0, top
	for range 200 {
		mid := (lo + hi) / 2
		if at(mid) <= budget {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
