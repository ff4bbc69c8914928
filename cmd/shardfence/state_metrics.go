package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardfence/shardfence/master/ha"
)

// Metrics of the processes' state that the libraries do not export
// themselves: whether a master is ready and in which role (what /readyz
// answers, for an alert that does not need a blackbox prober), and what a
// sidecar or a master found of its store's conformance certificate at
// start-up.
const (
	MasterReadyMetric      = "shardfence_master_ready"
	MasterRoleMetric       = "shardfence_master_role"
	StoreCertificateMetric = "shardfence_sidecar_store_certificate"
	// MasterStoreCertificateMetric is the same for the master's --store.
	MasterStoreCertificateMetric = "shardfence_master_store_certificate"
)

// What a sidecar found of its store's certificate (checkCertificate); every
// state is exported, 1 for the one it is in, so an alert can name it.
const (
	certCertified  = "certified"  // every fencing check of this build passed
	certMissing    = "missing"    // conformance never ran on this store
	certUnreadable = "unreadable" // the read failed
	certForeign    = "foreign"    // recorded for another store or driver
	certUnverified = "unverified" // checks of this build did not run
	certFailed     = "failed"     // a fencing check failed (--allow-fencing-failures)
)

var certificateStates = []string{certCertified, certMissing, certUnreadable, certForeign, certUnverified, certFailed}

// masterStateCollector reads the HA node (nil: an in-memory master, always
// ready) at scrape time.
type masterStateCollector struct {
	node        *ha.Node
	ready, role *prometheus.Desc
}

func newMasterStateCollector(n *ha.Node) *masterStateCollector {
	return &masterStateCollector{node: n,
		ready: prometheus.NewDesc(MasterReadyMetric, "1 while the master's /readyz answers 200 (a primary holding its term and leadership, or a standby within --standby-max-lag), else 0.", nil, nil),
		role:  prometheus.NewDesc(MasterRoleMetric, "1 for the role this master is in now (opening, standby, primary, fenced, failed; in_memory without --store).", []string{"role"}, nil)}
}

func (c *masterStateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.ready; ch <- c.role }

func (c *masterStateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.node == nil {
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, 1)
		ch <- prometheus.MustNewConstMetric(c.role, prometheus.GaugeValue, 1, "in_memory")
		return
	}
	ready := 0.0
	if c.node.Ready() == nil {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, ready)
	current := c.node.Status().Role
	for _, r := range []ha.Role{ha.RoleOpening, ha.RoleStandby, ha.RolePrimary, ha.RoleFenced, ha.RoleFailed} {
		v := 0.0
		if r == current {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.role, prometheus.GaugeValue, v, r.String())
	}
}

// registerCertificateState exports state (one of certificateStates) as
// StoreCertificateMetric: 1 for it, 0 for the others.
func registerCertificateState(reg prometheus.Registerer, state string) {
	registerCertificateStateAs(reg, StoreCertificateMetric, "sidecar", state)
}

// registerCertificateStateAs exports what the process (the sidecar or the
// master) found of its store's certificate as the gauge name.
func registerCertificateStateAs(reg prometheus.Registerer, name, process, state string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name,
		Help: "1 for what the " + process + " found of its store's conformance certificate at start-up: certified, missing, unreadable, foreign (another store's), unverified (checks of this build not run) or failed (a fencing check failed; started with --allow-fencing-failures)."},
		[]string{"state"})
	for _, s := range certificateStates {
		v := 0.0
		if s == state {
			v = 1
		}
		g.WithLabelValues(s).Set(v)
	}
	reg.MustRegister(g)
}
