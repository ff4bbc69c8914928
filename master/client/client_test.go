package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/shardfence/shardfence/master"
	"github.com/shardfence/shardfence/master/client"
)

func serve(t *testing.T, cfg master.Config, opts master.Options) (*master.Master, *httptest.Server) {
	t.Helper()
	m, err := master.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	path, h := master.NewHandler(m)
	mux.Handle(path, h)
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return m, srv
}

func TestClientRoundTrip(t *testing.T) {
	clk := master.NewFakeClock(time.Unix(1e9, 0))
	_, srv := serve(t, master.Config{}, master.Options{Clock: clk})
	ctx := context.Background()
	for _, proto := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}} {
		t.Run(proto.name, func(t *testing.T) {
			c := client.New(srv.Client(), srv.URL, proto.opts...)
			seg := uint64(len(proto.name))
			if err := c.MountSegment(ctx, "c1", master.SegmentSpec{ID: seg, Name: "s", Size: 1 << 20, Endpoint: "10.0.0.1:9000"}); err != nil {
				t.Fatal(err)
			}
			reps, err := c.PutStart(ctx, master.PutRequest{Client: "c1", Tenant: "t", Key: proto.name, Size: 100})
			if err != nil || len(reps) != 1 || reps[0].Endpoint != "10.0.0.1:9000" {
				t.Fatalf("PutStart: %+v %v", reps, err)
			}
			err = c.PutEnd(ctx, "c2", "t", proto.name)
			if !errors.Is(err, master.ErrWrongClient) {
				t.Fatalf("PutEnd by another client: %v", err)
			}
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("code %v", connect.CodeOf(err))
			}
			if err := c.PutEnd(ctx, "c1", "t", proto.name); err != nil {
				t.Fatal(err)
			}
			got, ttl, err := c.GetReplicaList(ctx, "t", proto.name)
			if err != nil || len(got) != 1 || ttl != 10*time.Second {
				t.Fatalf("GetReplicaList: %+v %v %v", got, ttl, err)
			}
			_, _, err = c.GetReplicaList(ctx, "t", "missing")
			if !errors.Is(err, master.ErrObjectNotFound) {
				t.Fatalf("missing key: %v", err)
			}
			if err := c.Remove(ctx, "t", proto.name, false); !errors.Is(err, master.ErrObjectLeased) {
				t.Fatalf("remove leased: %v", err)
			}
			if ok, err := c.Exist(ctx, "t", proto.name); !ok || err != nil {
				t.Fatalf("Exist: %v %v", ok, err)
			}
			res, err := c.BatchPutStart(ctx, []master.PutRequest{{Client: "c1", Tenant: "t", Key: "b" + proto.name, Size: 1}, {Client: "c1", Tenant: "t", Key: "x", Size: 1 << 30}})
			if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, master.ErrObjectTooLarge) {
				t.Fatalf("BatchPutStart: %+v %v", res, err)
			}
			errs, err := c.BatchPutEnd(ctx, []master.ObjectRef{{Client: "c1", Tenant: "t", Key: "b" + proto.name}, {Client: "c1", Tenant: "t", Key: "nope"}})
			if err != nil || errs[0] != nil || !errors.Is(errs[1], master.ErrObjectNotFound) {
				t.Fatalf("BatchPutEnd: %v %v", errs, err)
			}
			if st, err := c.Ping(ctx, "c1"); st != master.PingOK || err != nil {
				t.Fatalf("Ping: %v %v", st, err)
			}
			if st, err := c.Ping(ctx, "stranger"); st != master.PingNeedRemount || err != nil {
				t.Fatalf("Ping unknown: %v %v", st, err)
			}
			if _, err := c.ReMountSegment(ctx, "c1", []master.SegmentSpec{{ID: 99, Size: 1, Endpoint: "e"}}); !errors.Is(err, master.ErrSegmentNotFound) {
				t.Fatalf("remount unknown: %v", err)
			}
			st, err := c.Stats(ctx)
			if err != nil || st.GetObjects() == 0 {
				t.Fatalf("Stats: %v %v", st, err)
			}
			if _, err := c.UnmountSegment(ctx, "c1", seg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The API answers plain JSON over HTTP POST, as curl would send it.
func TestJSONOverHTTP(t *testing.T) {
	_, srv := serve(t, master.Config{}, master.Options{})
	post := func(method, body string) (int, map[string]any) {
		t.Helper()
		resp, err := srv.Client().Post(srv.URL+"/shardfence.master.v1.MasterService/"+method, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %s", method, b)
		}
		return resp.StatusCode, out
	}
	if code, _ := post("MountSegment", `{"clientId":"c1","segment":{"id":"1","size":"1000","endpoint":"e:1"}}`); code != 200 {
		t.Fatalf("mount: %d", code)
	}
	code, out := post("GetReplicaList", `{"tenant":"t","key":"nope"}`)
	if code != 404 || out["code"] != "not_found" {
		t.Fatalf("missing key over JSON: %d %v", code, out)
	}
	code, out = post("Stats", `{}`)
	if code != 200 || out["segments"] != "1" {
		t.Fatalf("stats over JSON: %d %v", code, out)
	}
}
