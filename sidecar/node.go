package sidecar

import (
	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
)

// What a sidecar tells the master when it registers as a node (package
// sidecar/agent), and how it reads the settings the master assigns.

// SettingsFromProto converts the API's shard settings (zero fields take
// the sidecar's defaults when the shard opens).
func SettingsFromProto(p *sidecarv1.ShardSettings) (Settings, error) { return settingsFromProto(p) }

// FencingAvailable reports whether the store passed the precondition
// probe, so fenced shards can open here.
func (s *Server) FencingAvailable() bool { return s.probeErr == nil }

// Node is the sidecar's node name (Options.Node).
func (s *Server) Node() string { return s.opts.Node }
