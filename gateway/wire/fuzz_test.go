package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"type":"ping"}`, `{"type":"start","command":"/bin/sh","args":["-c","x"],"pty":{"rows":1,"cols":1}}`,
		`{"type":"attach","id":"a","after":5}`, `{"type":"resize","channel":1,"rows":0,"cols":2}`,
		`{"type":"x"}`, `{}`, `{"type":"ping"}{}`, `[`, `{"type":"reauth","token":""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error does not wrap ErrProtocol: %v", err)
			}
			return
		}
		// An accepted request has a known type and survives a round trip.
		if r.check() != nil || len(r.Req) > MaxReqBytes {
			t.Fatalf("accepted an invalid request %+v", r)
		}
		again, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if r2, err := DecodeRequest(again); err != nil || r2.Type != r.Type {
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

func TestDecodeRequestBoundsEchoedFields(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 5000)
	for _, msg := range []string{
		`{"type":"attach","id":"` + long[:129] + `"}`,
		`{"type":"signal","channel":1,"signal":"` + long[:17] + `"}`,
		`{"type":"start","command":"` + long + `"}`,
		`{"type":"ping","req":"` + long[:65] + `"}`,
	} {
		if _, err := DecodeRequest([]byte(msg)); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "longer than") {
			t.Errorf("%.60s...: %v", msg, err)
		}
	}
}
