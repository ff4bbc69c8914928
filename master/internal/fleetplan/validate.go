package fleetplan

import (
	"errors"
	"fmt"
	"net/url"

	sidecarv1 "github.com/shardfence/shardfence/api/sidecar/v1"
	"github.com/shardfence/shardfence/internal/ident"
	"github.com/shardfence/shardfence/internal/shardsettings"
)

// ValidateName checks a node name or shard id (what names which): 1 to
// 128 characters of A-Z a-z 0-9 . _ -, not starting with '.' or '-'.
func ValidateName(what, s string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s %.64q %s (use 1-128 characters of A-Z a-z 0-9 . _ -, not starting with '.' or '-')", ident.ErrInvalidArgument, what, s, why)
	}
	switch {
	case s == "":
		return bad("is empty")
	case len(s) > 128:
		return bad("is too long")
	case s[0] == '.' || s[0] == '-':
		return bad("starts with '.' or '-'")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return bad(fmt.Sprintf("holds byte 0x%02X at %d", c, i))
		}
	}
	return nil
}

// ValidateNodeAddr checks a node's API address: the routing feed
// publishes it to clients, so it must be an http(s) URL of a host,
// without credentials, path, query or fragment.
func ValidateNodeAddr(addr string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: the node's API address %.64q %s", ident.ErrInvalidArgument, addr, why)
	}
	if addr == "" || len(addr) > 1024 {
		return bad("must be 1 to 1024 bytes")
	}
	u, err := url.Parse(addr)
	switch {
	case err != nil:
		return bad("is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("is not an http(s) URL")
	case u.Host == "" || u.Hostname() == "":
		return bad("names no host")
	case u.User != nil:
		return bad("carries credentials")
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return bad("has a path, query or fragment")
	}
	return nil
}

// Registration is a node's registration, as its checks need it.
type Registration struct {
	Name, Addr, AppAddr, Store, Session string
}

// CheckRegistration checks a registration's fields; a refusal comes with
// a hint for the operator ("" when there is none).
func CheckRegistration(r Registration) (hint string, err error) {
	if err := ValidateName("node name", r.Name); err != nil {
		return "start the sidecar with a --node name the master accepts", err
	}
	switch {
	case ValidateNodeAddr(r.Addr) != nil:
		return "give the sidecar's URL, as clients reach it (serve --advertise)", ValidateNodeAddr(r.Addr)
	case r.AppAddr != "" && ValidateNodeAddr(r.AppAddr) != nil:
		return "give the application's URL, as its clients reach it (serve --app-advertise)", ValidateNodeAddr(r.AppAddr)
	case r.Session == "" || len(r.Session) > 128:
		return "", fmt.Errorf("%w: the session must be 1 to 128 bytes", ident.ErrInvalidArgument)
	case len(r.Store) > 1024:
		return "", fmt.Errorf("%w: store URL of %d bytes", ident.ErrInvalidArgument, len(r.Store))
	}
	return "", nil
}

// Assign is an assignment request, as its checks need it.
type Assign struct {
	Shard, Node         string
	Term                int64
	Settings            *sidecarv1.ShardSettings
	AutoRestore         bool
	TakeoverAtSuspected bool
}

// CheckAssign checks an assignment request before the table is looked
// at: the names, the term, the settings (what the owner would refuse at
// every open attempt is refused now), and auto_restore only for a shard
// that is fenced and enforces it.
func CheckAssign(a Assign) (hint string, err error) {
	if err := ValidateName("shard id", a.Shard); err != nil {
		return "", err
	}
	if a.Node != "" {
		if err := ValidateName("node name", a.Node); err != nil {
			return "", err
		}
	}
	if a.Term < 0 || a.Term > 1<<53-1 {
		return "", fmt.Errorf("%w: term %d is outside 1..2^53-1", ident.ErrInvalidArgument, a.Term)
	}
	if _, err := shardsettings.FromProto(a.Settings); err != nil {
		var se *shardsettings.Error
		if !errors.As(err, &se) {
			return "", err
		}
		return "", fmt.Errorf("%w: settings: %s", ident.ErrInvalidArgument, se.Detail)
	}
	switch {
	case a.AutoRestore && a.Settings.GetFencingDisabled():
		return "assign it without auto_restore, or fenced",
			fmt.Errorf("%w: auto_restore needs a fenced shard: an unfenced shard is never auto-restored (a zombie could lose acknowledged writes)", ident.ErrInvalidArgument)
	case a.AutoRestore && a.Settings.GetMode() == sidecarv1.FencingMode_FENCING_MODE_OBSERVE:
		return "enforce fencing first (per_sync, create_only or lease), or assign it without auto_restore",
			fmt.Errorf("%w: auto_restore needs a fenced shard: observe mode only reports what fencing would refuse (a zombie keeps acknowledging)", ident.ErrInvalidArgument)
	case a.TakeoverAtSuspected && !a.AutoRestore:
		return "", fmt.Errorf("%w: takeover at suspected needs auto_restore", ident.ErrInvalidArgument)
	}
	return "", nil
}

// CheckReportFields bounds the free-form fields of a node's report.
func CheckReportFields(contextLen, errLen, reasonLen, allocationLen int) error {
	if contextLen > 64<<10 || errLen > 4096 || reasonLen > 128 || allocationLen > 512 {
		return fmt.Errorf("%w: report fields too long", ident.ErrInvalidArgument)
	}
	return nil
}
