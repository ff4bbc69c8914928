// Package deploy holds what an operator installs shardfence with, and the
// tests that keep it loadable: the Kubernetes manifests (kubernetes/,
// decoded strictly against the k8s.io/api types), the systemd units
// (systemd/, checked with systemd-analyze verify), the Prometheus rules
// (prometheus/, checked and unit-tested with promtool) and the Grafana
// dashboard (grafana/), whose every metric, like every rule's, must be
// exported by a running sidecar or master.
//
// It is a Go module of its own, like e2e/, so that k8s.io/api stays out of
// the requirements of the shardfence module that primaries import.
package deploy
