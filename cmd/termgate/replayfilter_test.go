package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/client"
)

// TestStripAnswers: each answer a terminal sends to a query is dropped,
// whole; keys and text are kept, byte for byte.
func TestStripAnswers(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"cursor position", "\x1b[12;1R", ""},
		{"extended cursor position", "\x1b[?12;1;1R", ""},
		{"DA1", "\x1b[?1;2c", ""},
		{"DA2", "\x1b[>84;0;0c", ""},
		{"DA3", "\x1b[=0c", ""},
		{"DECRPM", "\x1b[?1;2$y", ""},
		{"ANSI DECRPM", "\x1b[4;2$y", ""},
		{"status", "\x1b[0n", ""},
		{"window size", "\x1b[8;24;80t", ""},
		{"kitty flags", "\x1b[?0u", ""},
		{"OSC 11 with BEL", "\x1b]11;rgb:0000/0000/0000\a", ""},
		{"OSC 10 with ST", "\x1b]10;rgb:ffff/ffff/ffff\x1b\\", ""},
		{"DECRQSS", "\x1bP1$r0m\x1b\\", ""},
		{"XTVERSION", "\x1bP>|tmux 3.3a\x1b\\", ""},
		{"answers among keys", "ls\x1b[2;1R\x1b[?1;2c -l\r", "ls -l\r"},
		{"the bash error", "\x1b[84;1R\x1b[84;1R", ""},
		{"plain text", "echo hello\r", "echo hello\r"},
		{"arrows", "\x1b[A\x1b[B\x1b[1;5C\x1bOD", "\x1b[A\x1b[B\x1b[1;5C\x1bOD"},
		{"function keys", "\x1b[15~\x1b[1;2P\x1bOP\x1b[Z", "\x1b[15~\x1b[1;2P\x1bOP\x1b[Z"},
		{"kitty key", "\x1b[97;5u", "\x1b[97;5u"},
		{"SGR mouse", "\x1b[<0;10;5M\x1b[<0;10;5m", "\x1b[<0;10;5M\x1b[<0;10;5m"},
		{"X10 mouse", "\x1b[M !!", "\x1b[M !!"},
		{"focus", "\x1b[I\x1b[O", "\x1b[I\x1b[O"},
		{"Escape alone", "\x1b", "\x1b"},
		{"Alt-[ then a", "\x1b[a", "\x1b[a"},
		{"Alt-] then x", "\x1b]x", "\x1b]x"},
		{"an answer cut short is kept", "\x1b[12;", "\x1b[12;"},
		{"an OSC cut short is kept", "\x1b]11;rgb:00", "\x1b]11;rgb:00"},
		{"an OSC interrupted by a key", "\x1b]1\x1b[A", "\x1b]1\x1b[A"},
		{"a paste", "\x1b[200~text\x1b[201~", "\x1b[200~text\x1b[201~"},
		{"UTF-8", "héllo ✓", "héllo ✓"},
	}
	for _, c := range cases {
		got, dropped := stripAnswers([]byte(c.in))
		if string(got) != c.want || dropped != len(c.in)-len(c.want) {
			t.Errorf("%s: %q became %q (%d dropped), want %q", c.name, c.in, got, dropped, c.want)
		}
	}
	long := "\x1b]11;" + strings.Repeat("x", maxAnswer) + "\a"
	if got, _ := stripAnswers([]byte(long)); string(got) != long {
		t.Errorf("an OSC string longer than %d bytes was dropped", maxAnswer)
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// TestReplayFilterWindow: answers are dropped while history is written and
// for replayGrace after its last event, then pass; with no history to
// replay, or without a filter, nothing is dropped.
func TestReplayFilterWindow(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1000, 0)}
	f := newReplayFilter(0, 3)
	f.now = clock.now
	answer := []byte("\x1b[5;1R")
	check := func(when string, want string) {
		t.Helper()
		if got := f.filter(answer); string(got) != want {
			t.Errorf("%s: %q passed as %q", when, answer, got)
		}
	}
	check("before any event", "")
	f.shown(client.Event{Seq: 2, Kind: "output"})
	clock.t = clock.t.Add(time.Hour)
	check("history half written, however long it takes", "")
	f.shown(client.Event{Seq: 3, Kind: "output"})
	clock.t = clock.t.Add(replayGrace - time.Millisecond)
	check("within the grace", "")
	clock.t = clock.t.Add(time.Millisecond)
	check("after the grace", string(answer))
	f.shown(client.Event{Seq: 9, Kind: "output"})
	check("later output", string(answer))
	if f.dropped != 3*len(answer) {
		t.Errorf("dropped %d bytes, want %d", f.dropped, 3*len(answer))
	}

	gap := newReplayFilter(0, 10)
	gap.now = clock.now
	gap.shown(client.Event{Kind: "gap", Gap: &client.Gap{From: 1, To: 11}})
	clock.t = clock.t.Add(replayGrace)
	if got := gap.filter(answer); string(got) != string(answer) {
		t.Errorf("a gap past the history did not end the replay")
	}
	if got := newReplayFilter(5, 5).filter(answer); string(got) != string(answer) {
		t.Errorf("nothing to replay, yet %q became %q", answer, got)
	}
	var none *replayFilter
	none.shown(client.Event{Seq: 1})
	if got := none.filter(answer); string(got) != string(answer) {
		t.Errorf("a nil filter dropped %q", answer)
	}
}

// TestReplayFilterReader: a read that held only answers is not reported
// as an empty one; keys around answers arrive in order.
func TestReplayFilterReader(t *testing.T) {
	t.Parallel()
	f := newReplayFilter(0, 1)
	r := f.reader(io.MultiReader(strings.NewReader("\x1b[?1;2c"), strings.NewReader("ab\x1b[3;3R"), strings.NewReader("c")))
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, []byte("abc")) {
		t.Errorf("read %q, %v; want abc", got, err)
	}
}
