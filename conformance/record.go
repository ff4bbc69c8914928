package conformance

import (
	"context"
	"time"

	"github.com/shardfence/shardfence/blobstore"
)

// RecordCertificate records what a run found on store, for serve and the
// master to read at start-up: the reports' certificate, issued at issued,
// merged over the one an earlier run recorded there (checks this run did
// not select keep what that run found; see MergeCertificates). It returns
// the certificate and the error of writing it.
func RecordCertificate(ctx context.Context, store *blobstore.Container, issued time.Time, reports ...Report) (Certificate, error) {
	cert := NewCertificate(store.String(), issued, reports...)
	if prev, err := ReadCertificate(ctx, store); err == nil {
		cert = MergeCertificates(prev, cert)
	}
	return cert, WriteCertificate(ctx, store, cert)
}
