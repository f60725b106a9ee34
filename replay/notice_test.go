package replay

import (
	"errors"
	"testing"
	"time"
)

func TestNoticeKind(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		if got := KindNotice.String(); got != "notice" {
			t.Errorf("KindNotice is %q, want notice", got)
		}
		at := time.Date(2026, 12, 1, 14, 5, 0, 0, time.UTC)
		n := &NoticeInfo{Reason: "idle_timeout", Message: "stopped soon", At: at}
		r := m.new(Config{})
		if _, err := r.Append(Event{Kind: KindNotice, Notice: n}); err != nil {
			t.Fatalf("append a notice: %v", err)
		}
		n.Reason = "changed"
		got, _ := r.Read(nil, 0, 0, 0)
		if len(got) != 1 || got[0].Notice == nil || got[0].Notice.Reason != "idle_timeout" || !got[0].Notice.At.Equal(at) {
			t.Fatalf("read back %+v; want the notice as appended, not the caller's later change", got)
		}
	})
}

func TestNoticeInvalid(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		n := &NoticeInfo{Reason: "timeout"}
		tests := []struct {
			name string
			ev   Event
		}{
			{"notice without info", Event{Kind: KindNotice}},
			{"notice without reason", Event{Kind: KindNotice, Notice: &NoticeInfo{Message: "x"}}},
			{"notice with data", Event{Kind: KindNotice, Notice: n, Data: []byte("x")}},
			{"notice with signal", Event{Kind: KindNotice, Notice: n, Signal: 9}},
			{"notice with exit", Event{Kind: KindNotice, Notice: n, Exit: &ExitInfo{}}},
			{"signal with notice", Event{Kind: KindSignal, Signal: 9, Notice: n}},
			{"exit with notice", Event{Kind: KindExit, Exit: &ExitInfo{}, Notice: n}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				if _, err := m.new(Config{}).Append(tt.ev); !errors.Is(err, ErrInvalid) {
					t.Errorf("Append: %v, want ErrInvalid", err)
				}
			})
		}
	})
}
