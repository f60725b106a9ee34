package main

import (
	"bytes"
	"io"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/client"
)

// replayGrace is how long after the last replayed event is written the
// local terminal's answers are still dropped: the terminal parses that
// output, and answers the last queries in it, a moment after the write.
// Measured with tmux on a 2-core machine: the last answer came 0.2 ms
// after the write (at most 0.5 ms) when idle; with six busy processes,
// 0.2 ms at the median, 25 ms at p90 and 228 ms at worst in 60 runs.
const replayGrace = 500 * time.Millisecond

// maxAnswer bounds the string answers (OSC, DCS, APC) the filter looks
// for; a longer one is taken for input and kept.
const maxAnswer = 4096

// replayFilter drops the local terminal's answers to the terminal queries
// in replayed history (the events up to client.Execution.HistoryEnd),
// while that history is written and for replayGrace after: the shell did
// not ask, and would take them for typed input ("bash: 2RR84: command not
// found"). Keys typed meanwhile pass; see stripAnswers for the rule. A nil
// filter drops nothing. Its methods are safe for concurrent use: output
// and input run in goroutines of their own.
type replayFilter struct {
	end uint64           // history ends at this sequence
	now func() time.Time // time.Now; tests set another

	mu      sync.Mutex
	on      bool      // history is being written, or its grace runs
	until   time.Time // the end of the grace; zero while history is written
	dropped int       // bytes of answers dropped
}

// newReplayFilter returns the filter of an attach after sequence after,
// whose history ends at end; with no history to replay it drops nothing.
func newReplayFilter(after, end uint64) *replayFilter {
	return &replayFilter{end: end, on: end > after, now: time.Now}
}

// shown notes that ev was written to the local terminal: once history's
// last event is, the grace starts.
func (f *replayFilter) shown(ev client.Event) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	past := ev.Seq >= f.end || (ev.Gap != nil && ev.Gap.To > f.end)
	if f.on && f.until.IsZero() && past {
		f.until = f.now().Add(replayGrace)
	}
}

// active reports whether answers are being dropped now.
func (f *replayFilter) active() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.on && !f.until.IsZero() && !f.now().Before(f.until) {
		f.on = false
	}
	return f.on
}

// filter returns p without the terminal answers in it while the filter is
// active, and p itself otherwise.
func (f *replayFilter) filter(p []byte) []byte {
	if !f.active() {
		return p
	}
	kept, dropped := stripAnswers(p)
	if dropped > 0 {
		f.mu.Lock()
		f.dropped += dropped
		f.mu.Unlock()
	}
	return kept
}

// reader returns r with the filter applied to each read; a read that
// held only answers is not reported, the next one is made.
func (f *replayFilter) reader(r io.Reader) io.Reader {
	if f == nil {
		return r
	}
	return &filteredReader{r: r, f: f}
}

type filteredReader struct {
	r io.Reader
	f *replayFilter
}

func (fr *filteredReader) Read(p []byte) (int, error) {
	for {
		n, err := fr.r.Read(p)
		if n > 0 {
			kept := fr.f.filter(p[:n])
			n = copy(p, kept)
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// stripAnswers removes from p what a terminal sends in answer to a query,
// and keeps everything else, so keys typed during a replay still reach
// the shell. Dropped, whole and within one read:
//
//   - CSI ... R: a cursor position report (DSR 6, DECXCPR with "?");
//   - CSI ? ... c, CSI > ... c, CSI = ... c: device attributes (DA1-3);
//   - CSI ... $ y: a mode report (DECRPM, to DECRQM);
//   - CSI ... n and CSI ? ... n: a status report (DSR 5 and others);
//   - CSI digits ... t: a window report (XTWINOPS 14, 18...);
//   - CSI ? ... u: keyboard flags (the kitty keyboard protocol);
//   - OSC ... (BEL or ST), DCS ... ST, APC ... ST: colour, clipboard and
//     setting reports (OSC 10/11/4/52, DECRQSS, XTVERSION, XTGETTCAP).
//
// Keys are CSI sequences ending in ~, A-D, H, F, P-S, Z, u without "?",
// mouse reports (CSI M, CSI < ... M/m) and focus reports (CSI I/O), SS3
// and plain bytes, all kept. One key looks like an answer: xterm sends
// CSI 1;2R for Shift+F3, which is dropped during the replay's grace. A
// sequence cut by the end of p is kept: a terminal writes an answer whole.
func stripAnswers(p []byte) (kept []byte, dropped int) {
	if bytes.IndexByte(p, 0x1b) < 0 {
		return p, 0
	}
	out := make([]byte, 0, len(p))
	for i := 0; i < len(p); {
		n := answerLen(p[i:])
		if n > 0 {
			dropped += n
			i += n
			continue
		}
		out = append(out, p[i])
		i++
	}
	return out, dropped
}

// answerLen is the length of the terminal answer p starts with, or 0.
func answerLen(p []byte) int {
	if len(p) < 3 || p[0] != 0x1b {
		return 0
	}
	switch p[1] {
	case '[':
		return csiAnswerLen(p)
	case ']':
		return stringLen(p, true)
	case 'P', '_':
		return stringLen(p, false)
	}
	return 0
}

// csiAnswerLen parses the CSI sequence p starts with (ESC [ parameters,
// intermediates, final byte) and returns its length when it is an answer.
func csiAnswerLen(p []byte) int {
	i := 2
	for i < len(p) && p[i] >= 0x30 && p[i] <= 0x3f {
		i++
	}
	params := p[2:i]
	for i < len(p) && p[i] >= 0x20 && p[i] <= 0x2f {
		i++
	}
	inter := p[2+len(params) : i]
	if i >= len(p) || p[i] < 0x40 || p[i] > 0x7e {
		return 0 // cut short, or not a CSI sequence
	}
	if csiIsAnswer(params, string(inter), p[i]) {
		return i + 1
	}
	return 0
}

// csiIsAnswer applies stripAnswers' rule to one CSI sequence.
func csiIsAnswer(params []byte, inter string, final byte) bool {
	var prefix byte
	if len(params) > 0 && params[0] >= 0x3c {
		prefix = params[0] // one of < = > ?
	}
	if inter == "$" {
		return final == 'y'
	}
	if inter != "" {
		return false
	}
	switch final {
	case 'R', 'n':
		return prefix == 0 || prefix == '?'
	case 'c':
		return prefix == '?' || prefix == '>' || prefix == '='
	case 't':
		return prefix == 0 && len(params) > 0
	case 'u':
		return prefix == '?'
	}
	return false
}

// stringLen is the length of the OSC, DCS or APC string p starts with,
// up to and with its terminator (ST, or BEL where bel), or 0 when it has
// none within maxAnswer.
func stringLen(p []byte, bel bool) int {
	for i := 2; i < len(p) && i < maxAnswer; i++ {
		switch {
		case bel && p[i] == 0x07:
			return i + 1
		case p[i] == 0x1b:
			if i+1 < len(p) && p[i+1] == '\\' {
				return i + 2
			}
			return 0 // another sequence starts: this was no answer
		}
	}
	return 0
}
