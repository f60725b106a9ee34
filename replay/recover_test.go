package replay

import (
	"errors"
	"strings"
	"testing"
)

func TestRecoverRefuses(t *testing.T) {
	t.Parallel()
	cfg := Config{MaxBytes: 1 << 10, MaxEvents: 8}
	good := func() []byte {
		mem := memoryFor(cfg)
		r := New(Config{MaxBytes: cfg.MaxBytes, MaxEvents: cfg.MaxEvents, Memory: mem})
		r.AppendOutput(StreamPTY, []byte("hello"))
		r.AppendOutput(StreamPTY, []byte("world"))
		return mem
	}
	tests := []struct {
		name string
		cfg  Config
		mem  func() []byte
		want string
	}{
		{"zeroed", cfg, func() []byte { return memoryFor(cfg) }, "no magic"},
		{"too short", cfg, func() []byte { return memoryFor(cfg)[:100] }, "holds no ring"},
		{"other bounds", Config{MaxBytes: 2 << 10, MaxEvents: 8}, good, "made with max_bytes 1024 and max_events 8, recovered with 2048 and 8"},
		{"other version", cfg, func() []byte { m := good(); m[offVersion]++; return m }, "layout version 2"},
		{"damaged header", cfg, func() []byte { m := good(); m[offMaxBytes+7] ^= 1; return m }, "header CRC"},
		{"damaged record", cfg, func() []byte { m := good(); m[hdrSize+rTime] ^= 1; return m }, "CRC mismatch"},
		{"damaged commit", cfg, func() []byte { m := good(); m[offCommit] = 40; return m }, "oldest sequence 1, newest 40"},
	}
	for _, tt := range tests {
		c := tt.cfg
		c.Memory = tt.mem()
		_, err := Recover(c)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrCorrupt saying %q", tt.name, err, tt.want)
		}
	}
}

func TestReserveCommit(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		r := m.new(Config{})
		if _, err := r.Commit(StreamPTY, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("commit without reserve: %v", err)
		}
		if _, err := r.Extend(1); !errors.Is(err, ErrInvalid) {
			t.Errorf("extend without reserve: %v", err)
		}
		for _, n := range []int{0, MaxReserve + 1} {
			if _, err := r.Reserve(StreamPTY, n); !errors.Is(err, ErrInvalid) {
				t.Errorf("reserve %d: %v", n, err)
			}
		}
		mem, err := r.Reserve(StreamStdout, 12)
		if err != nil || len(mem) != 12 {
			t.Fatalf("reserve: %d bytes, %v", len(mem), err)
		}
		if _, err := r.Reserve(StreamStdout, 5); !errors.Is(err, ErrInvalid) {
			t.Errorf("second reserve: %v", err)
		}
		// Another event meanwhile: the output takes the next sequence.
		if seq, _ := r.Append(Event{Kind: KindResize, Rows: 1, Cols: 1}); seq != 1 {
			t.Errorf("resize got %d", seq)
		}
		read := func(k int, s string) {
			t.Helper()
			piece, err := r.Extend(k)
			if err != nil || len(piece) != k {
				t.Fatalf("extend by %d: %d bytes, %v", k, len(piece), err)
			}
			copy(piece, s)
		}
		read(5, "hello")
		for _, k := range []int{0, -1, 8} {
			if _, err := r.Extend(k); !errors.Is(err, ErrInvalid) {
				t.Errorf("extend by %d of 7 left: %v", k, err)
			}
		}
		read(7, " world")
		if _, err := r.Commit(StreamStdout, 4); !errors.Is(err, ErrInvalid) {
			t.Errorf("commit of less than the earlier pieces: %v", err)
		}
		r.Reserve(StreamStdout, 12)
		read(5, "hello")
		read(7, " world")
		if seq, err := r.Commit(StreamStdout, 11); seq != 2 || err != nil {
			t.Errorf("commit: %d, %v", seq, err)
		}
		for _, pieces := range []int{0, 1} {
			if _, err := r.Reserve(StreamStdout, 3); err != nil {
				t.Fatal(err)
			}
			if pieces > 0 {
				read(3, "abc")
			}
			if seq, err := r.Commit(StreamStdout, 0); seq != 0 || err != nil {
				t.Errorf("cancel after %d pieces: %d, %v", pieces, seq, err)
			}
		}
		r.Reserve(StreamStdout, 3)
		read(3, "abc")
		if _, err := r.Commit(StreamStderr, 3); !errors.Is(err, ErrInvalid) {
			t.Errorf("commit of another stream: %v", err)
		}
		r.Reserve(StreamStdout, 3)
		if _, err := r.Commit(StreamStdout, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("commit of more than lent: %v", err)
		}
		evs, _ := r.Read(nil, 0, 0, 0)
		if len(evs) != 2 || string(evs[1].Data) != "hello world" || evs[1].Offset != 0 {
			t.Errorf("events %+v", evs)
		}
		r.Word(3).Store(7)
		if r.Word(3).Load() != 7 {
			t.Error("word lost")
		}
	})
}

func TestBackedSplitsLongOutput(t *testing.T) {
	t.Parallel()
	r := modes[1].new(Config{MaxBytes: 1 << 20})
	seq, err := r.AppendOutput(StreamPTY, make([]byte, 2*MaxReserve+1))
	evs, _ := r.Read(nil, 0, 0, 0)
	if seq != 3 || err != nil || len(evs) != 3 || len(evs[2].Data) != 1 || evs[2].Offset != 2*MaxReserve {
		t.Errorf("append: %d, %v; %d events", seq, err, len(evs))
	}
	if _, err := r.Append(Event{Kind: KindNotice, Notice: &NoticeInfo{Reason: "x", Message: strings.Repeat("m", MaxPayload)}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("long notice: %v", err)
	}
}
