package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func tenantEntries(m *Master) int {
	m.tenantsMu.Lock()
	defer m.tenantsMu.Unlock()
	return len(m.tenants)
}

// A refused PutStart leaves no tenant entry behind (each refusal used to
// keep one for ever: 50,000 refusals with unique tenants held 403 MB),
// whatever refused it: no room, a quota, too many replicas for the
// segments. A put that succeeds keeps its tenant, and so does a tenant
// with a configured quota once it holds an object.
func TestRefusedPutStartsLeaveNoTenant(t *testing.T) {
	m, _ := newTestMaster(t, Config{TenantQuotas: map[string]uint64{"capped": 10}}, Options{})
	mount(t, m, "c1", 1, 1000)
	ctx := context.Background()
	for i := range 5000 {
		req := PutRequest{Client: "c1", Tenant: fmt.Sprintf("tenant-%d", i), Key: "k", Size: 2000}
		switch i % 3 {
		case 1:
			req.Size, req.Replicas = 10, 2
		case 2:
			req.Tenant, req.Size = "capped", 11
		}
		if _, err := m.PutStart(ctx, req); err == nil {
			t.Fatalf("put %d was placed", i)
		}
	}
	if n := tenantEntries(m); n != 0 {
		t.Fatalf("%d tenant entries after 5000 refused puts", n)
	}
	put(t, m, "c1", "kept", "k", 10, PutOptions{})
	put(t, m, "c1", "capped", "k", 10, PutOptions{})
	if _, err := m.PutStart(ctx, PutRequest{Client: "c1", Tenant: "capped", Key: "k2", Size: 11}); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("a put over the quota: %v", err)
	}
	if n := tenantEntries(m); n != 2 {
		t.Fatalf("%d tenant entries with two tenants holding objects, want 2", n)
	}
	if st := m.Stats(); len(st.Tenants) != 2 {
		t.Fatalf("stats list %d tenants", len(st.Tenants))
	}
}

// A name of any size is refused with an answer of bounded size: a 1 MiB
// tenant and a 1 MiB key used to come back as a 3.5 MB error. The error
// message, its detail and every item of a batch answer repeat at most a
// few hundred bytes of each.
func TestHugeNamesAreEchoedBounded(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, Options{})
	mux := http.NewServeMux()
	path, h := NewHandler(m)
	mux.Handle(path, h)
	path, h = NewFleetHandlerFunc(func() (*Master, error) { return m, nil })
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	huge := strings.Repeat("é", 512<<10) // 1 MiB
	call := func(proc, body string) (int, string) {
		t.Helper()
		res, err := http.Post(srv.URL+proc, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for name, c := range map[string][2]string{
		"PutStart":       {"/shardfence.master.v1.MasterService/PutStart", `{"clientId":"` + huge + `","tenant":"` + huge + `","key":"` + huge + `","size":1}`},
		"PutEnd":         {"/shardfence.master.v1.MasterService/PutEnd", `{"clientId":"` + huge + `","tenant":"` + huge + `","key":"` + huge + `"}`},
		"GetReplicaList": {"/shardfence.master.v1.MasterService/GetReplicaList", `{"tenant":"` + huge + `","key":"k"}`},
		"MountSegment":   {"/shardfence.master.v1.MasterService/MountSegment", `{"clientId":"` + huge + `","segment":{"id":1,"size":0}}`},
		"AssignShard":    {"/shardfence.master.v1.MasterFleetService/AssignShard", `{"shard":"` + huge + `","node":"` + huge + `"}`},
		"ReportShard":    {"/shardfence.master.v1.MasterFleetService/ReportShard", `{"node":"` + huge + `","shard":"` + huge + `","error":"` + huge + `"}`},
		"BatchPutStart":  {"/shardfence.master.v1.MasterService/BatchPutStart", `{"items":[{"clientId":"c","tenant":"` + huge[:8000] + `","key":"k","size":1},{"clientId":"c","tenant":"t","key":"` + huge[:8000] + `","size":1}]}`},
	} {
		code, body := call(c[0], c[1])
		if len(body) > 16<<10 || code == http.StatusOK && name != "BatchPutStart" {
			t.Errorf("%s with 1 MiB names: %d, a %d-byte answer: %.200s", name, code, len(body), body)
		}
	}
}

// A batch of more than MaxBatchItems items is refused whole, before any
// item is done (400,000 items used to make a 76 MB answer); a batch at
// the cap goes through.
func TestBatchesAreCapped(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, Options{})
	mount(t, m, "c1", 1, 1<<30)
	path, h := NewHandler(m)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	items := func(n int, put bool) string {
		var b strings.Builder
		b.WriteString(`{"items":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			if put {
				fmt.Fprintf(&b, `{"clientId":"c1","tenant":"t","key":"k%d","size":1}`, i)
			} else {
				fmt.Fprintf(&b, `{"clientId":"c1","tenant":"t","key":"k%d"}`, i)
			}
		}
		b.WriteString(`]}`)
		return b.String()
	}
	call := func(proc, body string) (int, string) {
		t.Helper()
		res, err := http.Post(srv.URL+"/shardfence.master.v1.MasterService/"+proc, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, proc := range []string{"BatchPutStart", "BatchPutEnd", "BatchPutRevoke"} {
		code, body := call(proc, items(MaxBatchItems+1, proc == "BatchPutStart"))
		if code != http.StatusBadRequest || !strings.Contains(body, "invalid_argument") || !strings.Contains(body, "at most 10000") {
			t.Errorf("%s of %d items: %d %.300s", proc, MaxBatchItems+1, code, body)
		}
	}
	if st := m.Stats(); st.Objects != 0 {
		t.Fatalf("a refused batch placed %d objects", st.Objects)
	}
	if code, body := call("BatchPutStart", items(MaxBatchItems, true)); code != http.StatusOK {
		t.Fatalf("BatchPutStart of %d items: %d %.300s", MaxBatchItems, code, body)
	}
	if st := m.Stats(); st.Objects != MaxBatchItems {
		t.Fatalf("a batch at the cap placed %d objects", st.Objects)
	}
}

// The master's configuration has ranges: a monitor interval of 1ns, a
// lease of a century and a quota for the tenant "" are refused.
func TestConfigRanges(t *testing.T) {
	for name, cfg := range map[string]Config{
		"monitor 1ns":      {Liveness: LivenessConfig{MonitorInterval: 1}},
		"monitor 2s":       {Liveness: LivenessConfig{ActiveTTL: time.Minute, MonitorInterval: 2 * time.Second}},
		"lease 876000h":    {DefaultLeaseTTL: 876000 * time.Hour},
		"recovery 876000h": {RecoveryLeaseTTL: 876000 * time.Hour},
		"soft pin 1000d":   {SoftPinTTL: 24000 * time.Hour},
		"quota for \"\"":   {TenantQuotas: map[string]uint64{"": 5}},
		"quota 0":          {TenantQuotas: map[string]uint64{"t": 0}},
	} {
		if _, err := New(cfg, Options{}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid argument", name, err)
		}
	}
}

// A small answer goes out uncompressed even to a client that accepts gzip
// (a ping answer gzipped cost more CPU than its bytes), and an answer of
// CompressMinBytes or more is still compressed.
func TestOnlyLargeAnswersAreCompressed(t *testing.T) {
	m, _ := newTestMaster(t, Config{}, Options{})
	mux := http.NewServeMux()
	path, h := NewHandler(m)
	mux.Handle(path, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	call := func(proc, body string) (string, int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+proc, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept-Encoding", "gzip")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %.200s", proc, res.StatusCode, b)
		}
		return res.Header.Get("Content-Encoding"), len(b)
	}
	if enc, n := call("/shardfence.master.v1.MasterService/Exist", `{"tenant":"t","key":"k"}`); enc != "" {
		t.Errorf("a %d-byte answer went out with Content-Encoding %q", n, enc)
	}
	var items []string
	for i := range 400 {
		items = append(items, fmt.Sprintf(`{"clientId":"not-mounted","tenant":"t","key":"k%d","size":1}`, i))
	}
	if enc, n := call("/shardfence.master.v1.MasterService/BatchPutStart", `{"items":[`+strings.Join(items, ",")+`]}`); enc != "gzip" {
		t.Errorf("a batch answer (%d bytes as sent) went out with Content-Encoding %q, want gzip", n, enc)
	}
}
