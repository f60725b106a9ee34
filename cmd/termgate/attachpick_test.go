package main

import (
	"strings"
	"testing"
	"time"
)

// pickList is a tenant's list: two running executions, the newer second,
// and a finished one.
var pickList = []executionSummary{
	{ID: "build", Status: "exited", Started: time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC), LastSeq: 40},
	{ID: "old-shell", Status: "running", PTY: true, Started: time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC), LastSeq: 7},
	{ID: "web-1", Status: "running", PTY: true, Started: time.Date(2026, 1, 2, 11, 0, 0, 0, time.UTC), LastSeq: 3},
}

// TestPickExecution: the picker reads its answers from a fake terminal:
// a number, an ID, Enter for the newest running one; a wrong answer is
// said and asked again, a bounded number of times; the end of input picks
// nothing.
func TestPickExecution(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, typed string
		list        []executionSummary
		want        string // the ID, or what the error says
		fails       bool
		says        string // in the output
	}{
		{"a number", "1\n", pickList, "build", false, "Enter for the newest running (web-1)"},
		{"an ID", "old-shell\n", pickList, "old-shell", false, ""},
		{"Enter is the newest running", "\n", pickList, "web-1", false, ""},
		{"spaces around", "  3 \r\n", pickList, "web-1", false, ""},
		{"out of range, then right", "4\n2\n", pickList, "old-shell", false, "4 is not in the list: type a number from 1 to 3"},
		{"unknown, then Enter", "nope\n\n", pickList, "web-1", false, `"nope" is neither`},
		{"Enter with none running", "\n\n\n", pickList[:1], "no execution chosen", true, "No execution is running"},
		{"too many wrong answers", "0\n0\n0\n1\n", pickList, "no execution chosen", true, "0 is not in the list"},
		{"end of input", "", pickList, "no execution chosen", true, ""},
		{"the last line without its end", "2", pickList, "old-shell", false, ""},
		{"a line longer than the bound", strings.Repeat("1", pickLineMax+10) + "\n", pickList, "no execution chosen", true, "neither"},
		{"no executions", "1\n", nil, "no executions: start one with termgate run", true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			in := strings.NewReader(c.typed)
			id, err := pickExecution(t.Context(), c.list, in, &out)
			switch {
			case c.fails && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("picked %q, err %v; want an error saying %q", id, err, c.want)
			case !c.fails && (err != nil || id != c.want):
				t.Errorf("picked %q, err %v; want %q", id, err, c.want)
			}
			if !strings.Contains(out.String(), c.says) {
				t.Errorf("output %q lacks %q", out.String(), c.says)
			}
			if c.list != nil && !strings.Contains(out.String(), "#  ID") {
				t.Errorf("no numbered list in %q", out.String())
			}
		})
	}
}

// TestPickReadsNoFurtherThanItsLine: what follows the answer stays in the
// terminal's input, for the attach.
func TestPickReadsNoFurtherThanItsLine(t *testing.T) {
	t.Parallel()
	in := strings.NewReader("2\nls -l\n")
	if id, err := pickExecution(t.Context(), pickList, in, &strings.Builder{}); err != nil || id != "old-shell" {
		t.Fatalf("picked %q, %v", id, err)
	}
	if rest := in.Len(); rest != len("ls -l\n") {
		t.Errorf("%d bytes left after the answer, want %d", rest, len("ls -l\n"))
	}
}

// TestAttachWithoutIDOrTerminal: without a terminal, attach still
// requires --id (a usage error), before it reaches any gateway.
func TestAttachWithoutIDOrTerminal(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, "1\n", "attach", "--url", "http://127.0.0.1:1", "--token", "x")
	if code != 2 || !strings.Contains(stderr, "--id is required") {
		t.Errorf("status %d, stderr %q", code, stderr)
	}
}
