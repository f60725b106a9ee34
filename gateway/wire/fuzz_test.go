package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// FuzzDecodeRequest checks DecodeRequest's contract: only what is not one
// JSON object is a protocol error (the server closes); anything else is
// accepted or refused with a wire code and a req short enough to echo.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping"}`, `{"type":"start","command":"/bin/sh","args":["-c","x"],"pty":{"rows":1,"cols":1}}`,
		`{"type":"attach","id":"a","after":5}`, `{"type":"resize","channel":1,"rows":0,"cols":2}`,
		`{"type":"x"}`, `{}`, `{"type":"ping"}{}`, `[`, `{"type":"reauth","token":""}`,
		`{"type":"ping","later":{"a":[1]}}`, `{"type":"attach","id":"a","after":"5","req":"r"}`, `null`, `[1]`,
		`{"type":"start","flow":"fast"}`, `{"type":"ack","channel":1,"seq":3}`, ` {"type":"ping"} `, `{"type":"ping"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		var refused *RequestError
		switch {
		case errors.Is(err, ErrProtocol):
			if json.Valid(b) && isObject(b) {
				t.Fatalf("closed on a JSON object: %v", err)
			}
			return
		case errors.As(err, &refused):
			if !json.Valid(b) || !isObject(b) {
				t.Fatalf("answered what is not a JSON object: %v", err)
			}
			if !slices.Contains(Codes(), refused.Code) || refused.Msg == "" || len(r.Req) > MaxReqBytes {
				t.Fatalf("refusal %+v with req of %d bytes", refused, len(r.Req))
			}
			return
		case err != nil:
			t.Fatalf("error neither a protocol error nor a refusal: %v", err)
		}
		// An accepted request has a known type and survives a round trip.
		if r.checkType() != nil || r.checkLengths() != nil || r.check() != nil || len(r.Req) > MaxReqBytes {
			t.Fatalf("accepted an invalid request %+v", r)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if r2, err := DecodeRequest(again); err != nil || r2.Type != r.Type || r2.Req != r.Req || r2.Channel != r.Channel {
			t.Fatalf("round trip: %v, %+v", err, r2)
		}
	})
}

func FuzzDecodeInput(f *testing.F) {
	f.Add(AppendInput(nil, 1, 0, []byte("hi")))
	f.Add([]byte{FrameInput})
	f.Add([]byte{FrameOutput, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeInput(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error does not wrap ErrProtocol: %v", err)
			}
			return
		}
		if in.Channel == 0 || !bytes.Equal(AppendInput(nil, in.Channel, in.Offset, in.Data), b) {
			t.Fatalf("decode/encode mismatch for %x", b)
		}
	})
}

func TestOutputFrameRoundTrip(t *testing.T) {
	t.Parallel()
	b := AppendOutputHeader(nil, 7, 42, 3, 1<<40, 4)
	b = append(b, "data"...)
	o, err := DecodeOutput(b)
	if err != nil || o.Channel != 7 || o.Seq != 42 || o.Stream != 3 || o.Offset != 1<<40 || string(o.Data) != "data" {
		t.Fatalf("%+v, %v", o, err)
	}
	if len(b) != OutputHeaderLen+4 || OutputHeaderLen != 26 {
		t.Fatalf("header is %d bytes", len(b)-4)
	}
	if _, err := DecodeOutput(b[:len(b)-1]); err == nil {
		t.Fatal("a truncated output frame decoded")
	}
}

// TestDecodeRequestRefusals: every refusal carries the code the server
// answers with, and the fields the answer echoes.
func TestDecodeRequestRefusals(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 5000)
	for _, c := range []struct {
		msg, code, req string
		channel        uint32
	}{
		{`{"type":"attach","req":"r","id":"` + long[:MaxIDBytes+1] + `"}`, CodeInvalidID, "r", 0},
		{`{"type":"signal","channel":3,"signal":"` + long[:17] + `"}`, CodeSignalNotAllowed, "", 3},
		{`{"type":"start","req":"r","command":"` + long + `"}`, CodeInvalidSpec, "r", 0},
		{`{"type":"start","cwd":"` + long + `"}`, CodeInvalidSpec, "", 0},
		{`{"type":"start","args":["` + strings.Repeat(long, 53) + `"]}`, CodeInvalidSpec, "", 0},
		{`{"type":"start","args":[` + strings.Repeat(`"",`, MaxArgs-1) + `""]}`, CodeInvalidSpec, "", 0},
		{`{"type":"ping","req":"` + long[:65] + `"}`, CodeInvalidRequest, "", 0},
		{`{"type":"attach","req":"r","id":"a","incarnation":"` + long[:65] + `"}`, CodeInvalidRequest, "r", 0},
		{`{"type":"reauth","token":"` + strings.Repeat(long, 2) + `"}`, CodeUnauthorized, "", 0},
		{`{"type":"later","req":"r","channel":2}`, CodeUnsupported, "r", 2},
		{`{"req":"r"}`, CodeInvalidRequest, "r", 0},
		{`{"type":"attach","req":"r"}`, CodeInvalidRequest, "r", 0},
		{`{"type":"resize","req":"r","rows":1,"cols":1}`, CodeInvalidRequest, "r", 0},
		{`{"type":"attach","req":"r","id":"a","after":"5"}`, CodeInvalidRequest, "r", 0},
		{`{"type":"ack","req":"r","channel":4,"seq":-1}`, CodeInvalidRequest, "r", 4},
		{`{"type":"start","req":"r","flow":"fast"}`, CodeInvalidSpec, "r", 0},
		{`{"type":"start","req":"r","hold_ms":-1}`, CodeInvalidSpec, "r", 0},
	} {
		r, err := DecodeRequest([]byte(c.msg))
		var refused *RequestError
		if !errors.As(err, &refused) || refused.Code != c.code || errors.Is(err, ErrProtocol) {
			t.Errorf("%.60s...: %v, want code %s", c.msg, err, c.code)
			continue
		}
		if r.Req != c.req || r.Channel != c.channel {
			t.Errorf("%.60s...: echoes req %q channel %d, want %q %d", c.msg, r.Req, r.Channel, c.req, c.channel)
		}
	}
}

// TestDecodeRequestAccepts: unknown fields are ignored and resize takes
// any size (the server clamps it), so a newer client is not refused.
func TestDecodeRequestAccepts(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{
		`{"type":"ping","later":{"nested":[1,2]},"another":null}`,
		`{"type":"resize","channel":1,"rows":0,"cols":0}`,
		`{"type":"resize","channel":1}`,
		`{"type":"start","flow":"live","hold_ms":1000}`,
		`{"type":"start","flow":"hold"}`,
		`{"type":"attach","id":"a","after":3,"seen":10,"ack":true,"incarnation":"` + strings.Repeat("i", MaxIncarnationBytes) + `"}`,
		" \n{\"type\":\"ping\"}\t",
	} {
		if _, err := DecodeRequest([]byte(msg)); err != nil {
			t.Errorf("%.60s: %v", msg, err)
		}
	}
}

// TestDecodeRequestFraming: only what is not one JSON object is a
// protocol error.
func TestDecodeRequestFraming(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{``, ` `, `null`, `[]`, `"ping"`, `1`, `{`, `{"type":"ping"}{}`, `{"type":"ping"}}`, `{"type":"ping"} x`, `{"type":}`} {
		_, err := DecodeRequest([]byte(msg))
		var refused *RequestError
		if !errors.Is(err, ErrProtocol) || errors.As(err, &refused) {
			t.Errorf("%q: %v, want a protocol error", msg, err)
		}
	}
}
