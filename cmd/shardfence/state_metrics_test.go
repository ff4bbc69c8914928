package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func scrape(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, res.StatusCode, err)
	}
	return string(b)
}

// A sidecar on a store conformance never ran on says so in
// shardfence_sidecar_store_certificate; after `shardfence conformance` a
// new sidecar there reports it certified (the fencing suite alone
// records the certificate; the blob suite runs on the filesystem in
// blobstore/fs and on mem in TestConformanceOnMem).
func TestStoreCertificateMetric(t *testing.T) {
	store := "file://" + t.TempDir()
	addr, stop := startServe(t, "--store", store, "--listen", "127.0.0.1:0")
	body := scrape(t, "http://"+addr+"/metrics")
	for _, want := range []string{StoreCertificateMetric + `{state="missing"} 1`, StoreCertificateMetric + `{state="certified"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("an uncertified store: /metrics lacks %q", want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "conformance", "--store", store, "--fencing-only"); code != 0 {
		t.Fatalf("conformance: exit %d\n%s\n%s", code, out, errOut)
	}
	addr, _ = startServe(t, "--store", store, "--listen", "127.0.0.1:0")
	if body := scrape(t, "http://"+addr+"/metrics"); !strings.Contains(body, StoreCertificateMetric+`{state="certified"} 1`) {
		t.Errorf("a certified store: /metrics says\n%s", grepLines(body, StoreCertificateMetric))
	}
}

// A master with --store exports whether it is ready and its role; the
// in-memory master is always ready.
func TestMasterReadyAndRoleMetrics(t *testing.T) {
	url, _ := startMasterCmd(t, "--store", "file://"+t.TempDir(), "--cluster", "metrics", "--snapshot-interval", "0")
	waitFor(t, "the master to be ready", func() bool {
		res, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	body := scrape(t, url+"/metrics")
	for _, want := range []string{MasterReadyMetric + " 1", MasterRoleMetric + `{role="primary"} 1`, MasterRoleMetric + `{role="standby"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(body, "shardfence_master_r"))
		}
	}
	url, _ = startMasterCmd(t)
	if body := scrape(t, url+"/metrics"); !strings.Contains(body, MasterReadyMetric+" 1") || !strings.Contains(body, MasterRoleMetric+`{role="in_memory"} 1`) {
		t.Errorf("in-memory master:\n%s", grepLines(body, "shardfence_master_r"))
	}
}

func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
