// Package metricdef declares a Prometheus metric in one line: a name and
// a help text (and a histogram's buckets). Package master and package ha
// declare their metrics with it, and register them with Register.
package metricdef

import "github.com/prometheus/client_golang/prometheus"

// Counter is a counter named name.
func Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// Gauge is a gauge named name.
func Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// Histogram is a histogram named name with the given buckets.
func Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// Register registers cs with reg; a nil reg (tests, benchmarks) registers
// nothing.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) {
	if reg != nil {
		reg.MustRegister(cs...)
	}
}
