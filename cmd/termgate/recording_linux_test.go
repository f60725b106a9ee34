package main

import (
	"io"
	"reflect"
	"testing"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/session"
)

func TestServeRecordingFlags(t *testing.T) {
	o, err := parseServe([]string{"--dev", "--recordings-dir", "/var/lib/termgate/casts", "--record", "acme,globex", "--record-input", "--recording-max-size", "8M"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := gateway.RecordPolicy{Tenants: []string{"acme", "globex"}, Input: true}
	if !reflect.DeepEqual(o.server.Record, want) || o.session.RecordingsDir != "/var/lib/termgate/casts" || o.session.RecordingMaxSize != 8<<20 {
		t.Errorf("parsed %+v, %q, %d", o.server.Record, o.session.RecordingsDir, o.session.RecordingMaxSize)
	}
	if o, err := parseServe([]string{"--dev"}, io.Discard); err != nil || o.session.RecordingsDir != "" || o.session.RecordingMaxSize != session.DefaultRecordingMaxSize {
		t.Errorf("defaults: %v", err)
	}
	for _, bad := range [][]string{
		{"--record", "all"},
		{"--record-input"},
		{"--recordings-dir", "casts"},
		{"--recordings-dir", "/casts", "--recording-max-size", "1K"},
		{"--recordings-dir", "/casts", "--record", "a,,b"},
	} {
		if _, err := parseServe(append([]string{"--dev"}, bad...), io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
