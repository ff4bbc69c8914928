package echo

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// MaxDecodeError bounds the message of a request body's JSON decode error.
const MaxDecodeError = 512

// JSONCodecs are handler options that replace Connect's JSON codecs
// (application/json and application/json; charset=utf-8) with the same
// codec whose decode errors are bounded: protojson's error repeats the
// token it could not take, so a request holding one number or literal of
// 4 MiB came back, as an invalid_argument message, 4 MiB long.
func JSONCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(jsonCodec{"json"}),
		connect.WithCodec(jsonCodec{"json; charset=utf-8"}),
	}
}

// jsonCodec is Connect's protoJSONCodec with bounded decode errors.
type jsonCodec struct{ name string }

func (c jsonCodec) Name() string { return c.name }

func (jsonCodec) IsBinary() bool { return false }

func (jsonCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return protojson.MarshalOptions{}.Marshal(pm)
}

func (jsonCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return protojson.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (jsonCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	if len(b) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	// Unknown fields are dropped, as Connect's codec does, so that
	// clients and servers need not share one version of the schema.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, pm); err != nil {
		return clipped{fmt.Errorf("unmarshal into %T: %w", m, err), MaxDecodeError}
	}
	return nil
}

// clipped bounds an error's message; errors.Is and errors.As still see
// the error.
type clipped struct {
	err error
	n   int
}

func (e clipped) Error() string { return ClipN(e.err.Error(), e.n) }
func (e clipped) Unwrap() error { return e.err }
