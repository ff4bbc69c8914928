// Package kvclient is the client of the example key-value service
// (examples/kv). It knows only the masters: the routing feed
// (client.Router) names each shard's owner and the address of the kv
// process next to it, and a call refused with nothing written (the
// process does not serve the shard, or is loading it) waits for the next
// owner instead of polling.
package kvclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/shardfence/shardfence/client"
)

// ShardOf is the shard a key lives in: kv-0 .. kv-(n-1).
func ShardOf(key string, n int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return fmt.Sprintf("kv-%d", h.Sum32()%uint32(n))
}

// ErrUnknown: the write may or may not have taken effect (a timeout, a
// process that died with it in flight, or a 504).
var ErrUnknown = errors.New("outcome unknown")

// Client calls the kv service.
type Client struct {
	router *client.Router
	shards int
	hc     *http.Client
}

// New returns a client over the cluster whose masters are at masters; the
// keys spread over shards shards.
func New(masters []string, shards int) (*Client, error) {
	r, err := client.NewRouter(masters)
	if err != nil {
		return nil, err
	}
	return &Client{router: r, shards: shards, hc: &http.Client{Timeout: 10 * time.Second}}, nil
}

// Close stops following the routing feed.
func (c *Client) Close() error { return c.router.Close() }

// Get returns the key's value and whether it exists.
func (c *Client) Get(ctx context.Context, key string) (string, bool, error) {
	var out struct {
		Value string `json:"value"`
		Found bool   `json:"found"`
	}
	err := c.call(ctx, key, http.MethodGet, "", nil, &out)
	return out.Value, out.Found, err
}

// Put sets the key's value.
func (c *Client) Put(ctx context.Context, key, value string) error {
	return c.call(ctx, key, http.MethodPut, "", map[string]any{"value": value}, nil)
}

// CAS sets the key to value if it holds expect (or, with absent, holds
// nothing); swapped says whether it did.
func (c *Client) CAS(ctx context.Context, key, expect string, absent bool, value string) (bool, error) {
	var out struct {
		Swapped bool `json:"swapped"`
	}
	err := c.call(ctx, key, http.MethodPost, "/cas", map[string]any{"expect": expect, "absent": absent, "value": value}, &out)
	return out.Swapped, err
}

// Delete removes the key; deleted says whether it existed.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	var out struct {
		Deleted bool `json:"deleted"`
	}
	err := c.call(ctx, key, http.MethodDelete, "", nil, &out)
	return out.Deleted, err
}

// call sends one request to the process serving the key's shard. Refused
// with nothing written (421, 503, or no connection at all), it waits for
// the routing feed to name an owner other than the one it tried; any
// other failure of a write is ErrUnknown.
func (c *Client) call(ctx context.Context, key, method, suffix string, in, out any) error {
	shard := ShardOf(key, c.shards)
	write := method != http.MethodGet
	var body []byte
	if in != nil {
		body, _ = json.Marshal(in)
	}
	var tried client.Route
	for {
		rt, err := c.route(ctx, shard, tried)
		if err != nil {
			return err
		}
		// A process that stops answering (its sidecar frozen, say) is given
		// up as soon as the feed names another owner.
		actx, cancel := c.router.WhileRouted(ctx, shard, rt)
		req, err := http.NewRequestWithContext(actx, method, rt.AppAddr+"/v1/kv/"+url.PathEscape(key)+suffix, bytes.NewReader(body))
		if err != nil {
			cancel()
			return err
		}
		res, err := c.hc.Do(req)
		var raw []byte
		var rerr error
		if err == nil {
			raw, rerr = io.ReadAll(io.LimitReader(res.Body, 1<<20))
			res.Body.Close()
		}
		moved := context.Cause(actx) == client.ErrMoved
		cancel()
		if err != nil {
			if write && !dialFailed(err) {
				return fmt.Errorf("%w: %v", ErrUnknown, err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			tried = rt
			continue
		}
		if rerr != nil && moved && !write {
			tried = rt
			continue
		}
		switch {
		case rerr != nil && write:
			return fmt.Errorf("%w: %v", ErrUnknown, rerr)
		case res.StatusCode == http.StatusOK:
			if out != nil {
				return json.Unmarshal(raw, out)
			}
			return nil
		case res.StatusCode == http.StatusMisdirectedRequest || res.StatusCode == http.StatusServiceUnavailable:
			tried = rt
			if err := sleep(ctx, 20*time.Millisecond); err != nil {
				return err
			}
		case res.StatusCode == http.StatusGatewayTimeout && write:
			return fmt.Errorf("%w: %s", ErrUnknown, raw)
		default:
			return fmt.Errorf("kv %s %s: %s: %s", method, key, res.Status, raw)
		}
	}
}

// route waits for a serving owner of shard with an application address,
// other than tried when the feed names one (the same owner again after a
// while: it may have been loading the shard).
func (c *Client) route(ctx context.Context, shard string, tried client.Route) (client.Route, error) {
	if tried.Term == 0 {
		return c.router.Route(ctx, shard)
	}
	wctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
	defer cancel()
	for {
		rt, err := c.router.Route(wctx, shard)
		if err != nil && ctx.Err() == nil {
			return c.router.Route(ctx, shard)
		}
		if err != nil || rt.Term != tried.Term || rt.Node != tried.Node || rt.AppAddr == "" {
			return rt, err
		}
		if err := sleep(wctx, 20*time.Millisecond); err != nil {
			return rt, nil // the same owner: try it again
		}
	}
}

// dialFailed: the connection was never made, so nothing was sent.
func dialFailed(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) && bytes.Contains([]byte(ue.Err.Error()), []byte("connect: connection refused"))
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
