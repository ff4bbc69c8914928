package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// CertificateKey is where shardfence conformance records what a store
// passed, under the root of the store URL it was given: in the start-up
// probe's folder, which no shard id may name. shardfence serve reads it
// there at start-up (one GET), so certifying a store costs serve nothing.
const CertificateKey = blobstore.ProbePrefix + "certificate"

const (
	certificateFormat  = "shardfence.certificate"
	certificateVersion = 1
	// maxDetail clips the failure recorded per check.
	maxDetail = 600
)

var (
	// ErrNoCertificate: the store holds no certificate (shardfence
	// conformance never ran its fencing suite on it).
	ErrNoCertificate = errors.New("no conformance certificate in the store")
	// ErrCertificateInvalid: the stored certificate does not decode or its
	// digest does not match its content (edited or corrupt).
	ErrCertificateInvalid = errors.New("conformance certificate invalid")
	// ErrFencingCheckFailed: the certificate records a fencing check the
	// store failed; see *RefusalError.
	ErrFencingCheckFailed = errors.New("store failed a fencing check")
)

// Certificate is the outcome of shardfence conformance, recorded in the
// store it certifies: which store, which suite versions, and each check's
// status. Its digest covers its whole content (Encode, DecodeCertificate):
// an integrity check that catches corruption and hand edits, not a
// signature; whoever can write the store can delete shards too.
type Certificate struct {
	// Store is the store as its container names it (scheme, bucket or
	// directory, prefix; never credentials): a certificate copied to
	// another store, or made through another driver, does not count.
	Store  string        `json:"store"`
	Issued time.Time     `json:"issued"`
	Suites []SuiteRecord `json:"suites"`
}

// SuiteRecord is one suite's results in a certificate.
type SuiteRecord struct {
	Suite   Suite         `json:"suite"`
	Version int           `json:"version"`
	Checks  []CheckRecord `json:"checks"`
}

// CheckRecord is one check's result in a certificate.
type CheckRecord struct {
	Name   string   `json:"name"`
	Status Status   `json:"status"`
	Guards []string `json:"guards,omitempty"`
	// Detail is the first failure, clipped; the full report is the
	// command's output.
	Detail string `json:"detail,omitempty"`
	// At is when the check ran (when the run that recorded it started).
	At time.Time `json:"at"`
}

// NewCertificate records reports (one per suite run) for store.
func NewCertificate(store string, issued time.Time, reports ...Report) Certificate {
	c := Certificate{Store: store, Issued: issued.UTC()}
	for _, rep := range reports {
		guards := map[string][]string{}
		for _, ch := range rep.Suite.Checks() {
			guards[ch.Name] = ch.Guards
		}
		sr := SuiteRecord{Suite: rep.Suite, Version: rep.SuiteVersion}
		for _, r := range rep.Results {
			cr := CheckRecord{Name: r.Name, Status: r.Status, Guards: guards[r.Name], At: rep.Started.UTC()}
			if len(r.Details) > 0 && r.Status != Pass {
				cr.Detail = clipDetail(r.Details[0])
			}
			sr.Checks = append(sr.Checks, cr)
		}
		c.Suites = append(c.Suites, sr)
	}
	return c
}

// MergeCertificates returns next with what it did not check taken from
// prev, when both certify the same store: a check next skipped keeps prev's
// record of the same suite version, and a suite next did not run keeps
// prev's. So a run limited with --only does not forget the rest.
func MergeCertificates(prev, next Certificate) Certificate {
	if prev.Store != next.Store {
		return next
	}
	out := next
	out.Suites = nil
	for _, sr := range next.Suites {
		old, ok := prev.Suite(sr.Suite)
		merged := sr
		merged.Checks = slices.Clone(sr.Checks)
		if ok && old.Version == sr.Version {
			for i, ch := range merged.Checks {
				if ch.Status != Skip {
					continue
				}
				if j := slices.IndexFunc(old.Checks, func(o CheckRecord) bool { return o.Name == ch.Name }); j >= 0 && old.Checks[j].Status != Skip {
					merged.Checks[i] = old.Checks[j]
				}
			}
		}
		out.Suites = append(out.Suites, merged)
	}
	for _, sr := range prev.Suites {
		if _, ok := next.Suite(sr.Suite); !ok {
			out.Suites = append(out.Suites, sr)
		}
	}
	return out
}

func clipDetail(s string) string {
	if len(s) <= maxDetail {
		return s
	}
	cut := maxDetail
	for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return s[:cut] + "..."
}

// envelope is the stored form: the digest is over the compact JSON of the
// certificate exactly as stored, so no re-encoding can disagree with it.
type envelope struct {
	Format      string          `json:"format"`
	Version     int             `json:"version"`
	SHA256      string          `json:"sha256"`
	Certificate json.RawMessage `json:"certificate"`
}

// Encode returns the stored body: JSON, readable with any store client.
func (c Certificate) Encode() ([]byte, error) {
	inner, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(inner)
	return json.MarshalIndent(envelope{Format: certificateFormat, Version: certificateVersion, SHA256: hex.EncodeToString(sum[:]), Certificate: inner}, "", "  ")
}

// DecodeCertificate parses a stored certificate and verifies its digest.
func DecodeCertificate(body []byte) (Certificate, error) {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return Certificate{}, fmt.Errorf("%w: %v", ErrCertificateInvalid, err)
	}
	if env.Format != certificateFormat {
		return Certificate{}, fmt.Errorf("%w: format %q, want %q", ErrCertificateInvalid, env.Format, certificateFormat)
	}
	if env.Version != certificateVersion {
		return Certificate{}, fmt.Errorf("%w: version %d, this build reads %d (written by another shardfence version)", ErrCertificateInvalid, env.Version, certificateVersion)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, env.Certificate); err != nil {
		return Certificate{}, fmt.Errorf("%w: %v", ErrCertificateInvalid, err)
	}
	sum := sha256.Sum256(compact.Bytes())
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return Certificate{}, fmt.Errorf("%w: its digest does not match its content (edited or corrupt)", ErrCertificateInvalid)
	}
	var c Certificate
	if err := json.Unmarshal(env.Certificate, &c); err != nil {
		return Certificate{}, fmt.Errorf("%w: %v", ErrCertificateInvalid, err)
	}
	return c, nil
}

// WriteCertificate stores c at CertificateKey of store (the root of the
// store URL), replacing an earlier one.
func WriteCertificate(ctx context.Context, store *blobstore.Container, c Certificate) error {
	body, err := c.Encode()
	if err != nil {
		return err
	}
	if _, err := store.Put(ctx, CertificateKey, body); err != nil {
		return fmt.Errorf("recording the conformance certificate: %w", err)
	}
	return nil
}

// ReadCertificate reads and verifies the certificate of store (the root of
// the store URL): ErrNoCertificate when there is none.
func ReadCertificate(ctx context.Context, store *blobstore.Container) (Certificate, error) {
	obj, err := store.Get(ctx, CertificateKey)
	if errors.Is(err, blobstore.ErrNotFound) {
		return Certificate{}, fmt.Errorf("%w %s (run shardfence conformance --store URL)", ErrNoCertificate, store)
	}
	if err != nil {
		return Certificate{}, err
	}
	c, err := DecodeCertificate(obj.Body)
	if err != nil {
		return Certificate{}, fmt.Errorf("%s in %s: %w", CertificateKey, store, err)
	}
	return c, nil
}

// Suite returns the record of one suite, if the certificate has it.
func (c Certificate) Suite(s Suite) (SuiteRecord, bool) {
	for _, sr := range c.Suites {
		if sr.Suite == s {
			return sr, true
		}
	}
	return SuiteRecord{}, false
}

// Verdict is what a certificate says about running fenced shards on the
// store it names.
type Verdict struct {
	// Failed are the fencing checks the store failed: refuse it.
	Failed []CheckRecord
	// Unverified are fencing checks of this build's suite the certificate
	// does not record as passed (skipped, absent, or from an older suite
	// version): worth a warning, not a refusal.
	Unverified []string
	// BlobFailed are blob checks that failed: the protocol may not rely on
	// them (OPERATIONS.md lists known store limits), but an operator
	// should see them.
	BlobFailed []CheckRecord
}

// Judge reads the certificate against this build's fencing suite.
func (c Certificate) Judge() Verdict {
	var v Verdict
	passed := map[string]bool{}
	if sr, ok := c.Suite(FencingSuite); ok {
		for _, ch := range sr.Checks {
			switch ch.Status {
			case Fail:
				v.Failed = append(v.Failed, ch)
			case Pass:
				passed[ch.Name] = sr.Version == FencingVersion
			}
		}
	}
	for _, ch := range FencingSuite.Checks() {
		if !passed[ch.Name] {
			v.Unverified = append(v.Unverified, ch.Name)
		}
	}
	if sr, ok := c.Suite(BlobSuite); ok {
		for _, ch := range sr.Checks {
			if ch.Status == Fail {
				v.BlobFailed = append(v.BlobFailed, ch)
			}
		}
	}
	return v
}

// Refusal returns a *RefusalError when the certificate records a failed
// fencing check, else nil.
func (c Certificate) Refusal() error {
	v := c.Judge()
	if len(v.Failed) == 0 {
		return nil
	}
	return &RefusalError{Store: c.Store, Issued: c.Issued, Failed: v.Failed}
}

// RefusalError says which fencing checks a store failed, and so why fenced
// shards must not run on it.
type RefusalError struct {
	Store  string
	Issued time.Time
	Failed []CheckRecord
}

func (e *RefusalError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s failed %d fencing check(s) when shardfence conformance certified it at %s:", e.Store, len(e.Failed), e.Issued.Format(time.RFC3339))
	for _, ch := range e.Failed {
		fmt.Fprintf(&b, " %s (guards %s)", ch.Name, strings.Join(ch.Guards, ", "))
		if ch.Detail != "" {
			fmt.Fprintf(&b, ": %s", ch.Detail)
		}
		b.WriteString(";")
	}
	b.WriteString(" on this store a fenced shard can lose acknowledged writes or have two primaries acknowledge")
	return b.String()
}

// Unwrap makes errors.Is(err, ErrFencingCheckFailed) true.
func (e *RefusalError) Unwrap() error { return ErrFencingCheckFailed }
