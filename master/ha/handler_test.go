package ha

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/master"
)

// Every API a node mounts bounds one request message decompressed, by
// default: 100 KiB of gzip that inflate to 16 MiB are refused with
// resource_exhausted by the object, fleet and HA services alike, instead
// of inflated into the master's memory (1 MiB on the wire used to become
// 1 GiB).
func TestMountedAPIsBoundDecompressedRequests(t *testing.T) {
	n, err := New(Options{Store: mem.New(), Cluster: "c1", Node: "n1", Dir: t.TempDir(), Config: master.Config{Shards: 16}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	n.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	_, _ = zw.Write([]byte(`{"x":"` + strings.Repeat("a", 16<<20) + `"}`))
	_ = zw.Close()
	for _, path := range []string{
		"/shardfence.master.v1.MasterService/Ping",
		"/shardfence.master.v1.MasterFleetService/ListNodes",
		"/shardfence.master.v1.MasterHAService/Status",
	} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(body.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", "gzip")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(b), "resource_exhausted") {
			t.Errorf("%s with a gzip body of %d bytes inflating to 16 MiB: %d %.300s", path, body.Len(), res.StatusCode, b)
		}
	}
}
