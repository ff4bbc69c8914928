package sidecar

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A JSON body protojson cannot decode comes back as invalid_argument with
// a bounded message: protojson's error repeats the token it could not
// take, and a number of 100,000 digits came back whole.
func TestJSONDecodeErrorsAreBounded(t *testing.T) {
	e := newEnv(t, Options{}, HandlerOptions{})
	for _, body := range []string{
		`{"shard":1` + strings.Repeat("0", 100_000) + `}`,
		`{"shard":t` + strings.Repeat("r", 100_000) + `}`,
	} {
		res, err := http.Post(e.http.URL+"/shardfence.sidecar.v1.SidecarService/Status", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if !strings.Contains(string(b), "invalid_argument") || len(b) > 2048 {
			t.Errorf("an undecodable JSON body of %d bytes: %d, %d bytes: %.300s", len(body), res.StatusCode, len(b), b)
		}
	}
}
