package main

import (
	"io"
	"reflect"
	"testing"
	"time"

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
	if o, err := parseServe([]string{"--dev"}, io.Discard); err != nil || o.session.RecordingsDir != "" || o.session.RecordingMaxSize != session.DefaultRecordingMaxSize ||
		o.session.RecordingsMaxBytes != 4<<30 || o.session.RecordingsMaxBytesPerOwner != 1<<30 || o.session.RecordingsMaxFiles != 10000 ||
		o.session.RecordingsMaxFilesPerOwner != 1000 || o.session.RecordingsRetention != 7*24*time.Hour {
		t.Errorf("defaults: %v", err)
	}
	o, err = parseServe([]string{"--dev", "--recordings-dir", "/casts", "--recordings-max-bytes", "10G", "--recordings-max-bytes-per-tenant", "2G",
		"--recordings-max-files", "50", "--recordings-max-files-per-tenant", "5", "--recordings-retention", "0"}, io.Discard)
	if err != nil || o.session.RecordingsMaxBytes != 10<<30 || o.session.RecordingsMaxBytesPerOwner != 2<<30 || o.session.RecordingsMaxFiles != 50 ||
		o.session.RecordingsMaxFilesPerOwner != 5 || o.session.RecordingsRetention >= 0 {
		t.Errorf("budgets: %v, %+v", err, o.session)
	}
	for _, bad := range [][]string{
		{"--record", "all"},
		{"--record-input"},
		{"--recordings-dir", "casts"},
		{"--recordings-dir", "/casts", "--recording-max-size", "1K"},
		{"--recordings-dir", "/casts", "--record", "a,,b"},
		{"--recordings-dir", "/casts", "--recordings-max-bytes-per-tenant", "32M"},
		{"--recordings-dir", "/casts", "--recordings-max-bytes", "512M"},
		{"--recordings-dir", "/casts", "--recordings-max-files", "999"},
		{"--recordings-dir", "/casts", "--recordings-max-files-per-tenant", "0"},
		{"--recordings-dir", "/casts", "--recordings-retention", "-1h"},
	} {
		if _, err := parseServe(append([]string{"--dev"}, bad...), io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
