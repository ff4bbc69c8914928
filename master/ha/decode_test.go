package ha

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardfence/shardfence/blobstore/mem"
	"github.com/shardfence/shardfence/master"
)

// A JSON body protojson cannot decode comes back as invalid_argument with
// a bounded message, on every service a node mounts: protojson's error
// repeats the token it could not take, and a number of 100,000 digits
// came back whole (FuzzMasterAPI found it).
func TestJSONDecodeErrorsAreBounded(t *testing.T) {
	n, err := New(Options{Store: mem.New(), Cluster: "c1", Node: "n1", Dir: t.TempDir(), Config: master.Config{Shards: 16}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	n.Mount(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range []string{
		"/shardfence.master.v1.MasterService/Ping",
		"/shardfence.master.v1.MasterFleetService/DrainNode",
		"/shardfence.master.v1.MasterHAService/Status",
	} {
		body := `{"clientId":1` + strings.Repeat("0", 100_000) + `,"node":t` + strings.Repeat("r", 100_000) + `}`
		res, err := http.Post(srv.URL+path, "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(b), "invalid_argument") || len(b) > 2048 {
			t.Errorf("%s with an undecodable JSON body of %d bytes: %d, %d bytes: %.300s", path, len(body), res.StatusCode, len(b), b)
		}
	}
}
