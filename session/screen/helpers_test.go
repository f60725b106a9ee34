package screen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { sandboxtest.Main(m) }

// dump describes the complete state of s that a snapshot must reproduce,
// one item per line, so two states compare as text. With last it also
// includes the character REP repeats, which a snapshot cannot carry.
func dump(s *Screen, last bool) string {
	settle(s)
	var b strings.Builder
	fmt.Fprintf(&b, "size %dx%d alt=%v cur=%+v pen=%+v region=%d-%d\n", s.rows, s.cols, s.altActive, s.cur, s.pen, s.top, s.bot)
	fmt.Fprintf(&b, "modes %+v graphic=%v title=%q tabs=%v\n", s.modes, s.graphic, s.title, boolBytes(s.tabs))
	fmt.Fprintf(&b, "saved normal %+v\n", s.normal.saved)
	if s.alt != nil && s.alt.saved != (saved{}) {
		fmt.Fprintf(&b, "saved alt %+v\n", s.alt.saved)
	}
	if last {
		fmt.Fprintf(&b, "last %q parser %d\n", s.last, s.p.state)
	}
	for i := 0; i < s.sb.n; i++ {
		l := s.sb.at(i)
		fmt.Fprintf(&b, "sb %3d wraps=%v %q\n", i, s.sbWraps(l), s.appendScrollbackLine(nil, l))
	}
	dumpLines(&b, "normal", s.normal.lines, s.cols)
	if s.altActive {
		dumpLines(&b, "alt", s.alt.lines, s.cols)
	}
	return b.String()
}

// settle emulates what s holds pending, so its fields show its state.
func settle(s *Screen) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emulatePending()
}

// dumpLines describes every cell of ls, cols of them a line (those a
// line does not hold are default blanks); the wrap flag of the last line
// is left out, since nothing printed after it can reproduce it.
func dumpLines(b *strings.Builder, name string, ls []line, cols int) {
	for i := range ls {
		l := &ls[i]
		fmt.Fprintf(b, "%s %2d wraps=%v:", name, i, l.wraps && i < len(ls)-1)
		if len(l.cells) > cols || l.wraps && len(l.cells) != cols {
			fmt.Fprintf(b, " holds %d cells of %d", len(l.cells), cols)
		}
		for x := range cols {
			c := cell{r: ' '}
			if x < len(l.cells) {
				c = l.cells[x]
			}
			fmt.Fprintf(b, " %q", string(c.r)+string(c.comb))
			if c.pen != (pen{}) || c.kind != 0 {
				fmt.Fprintf(b, "%x/%x/%x/%d", c.pen.fg, c.pen.bg, c.pen.attr, c.kind)
			}
		}
		b.WriteByte('\n')
	}
}

// roundTrip feeds the snapshot of s to a fresh Screen of its size and
// returns it.
func roundTrip(t testing.TB, s *Screen, cfg Config) *Screen {
	t.Helper()
	snap := s.Snapshot(nil)
	cfg.Rows, cfg.Cols = s.Size()
	f := New(cfg)
	f.Write(snap)
	if err := checkNoQueries(snap); err != nil {
		t.Fatalf("snapshot %q: %v", snap, err)
	}
	return f
}

// diff returns the first differing lines of two dumps.
func diff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(al), len(bl)) {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  want %s\n  got  %s", i, x, y)
		}
	}
	return ""
}

// checkNoQueries parses a snapshot and fails on any sequence that is not
// on the list of those a snapshot may use: none of them makes a terminal
// answer.
func checkNoQueries(p []byte) error {
	for i := 0; i < len(p); i++ {
		if p[i] != 0x1b {
			if p[i] < 0x20 && p[i] != '\r' && p[i] != '\n' {
				return fmt.Errorf("control %#x at %d", p[i], i)
			}
			continue
		}
		if i+1 >= len(p) {
			return fmt.Errorf("ESC at the end")
		}
		i++
		switch c := p[i]; c {
		case 'c', '7', '8', 'H', '=':
		case '(':
			if i+1 >= len(p) || (p[i+1] != '0' && p[i+1] != 'B') {
				return fmt.Errorf("charset at %d", i)
			}
			i++
		case '[':
			j := i + 1
			for j < len(p) && p[j] >= 0x20 && p[j] <= 0x3f {
				j++
			}
			if j >= len(p) {
				return fmt.Errorf("unterminated CSI at %d", i)
			}
			seq := string(p[i+1 : j+1])
			if !allowedCSI(seq) {
				return fmt.Errorf("CSI %q at %d is not allowed", seq, i)
			}
			i = j
		case ']':
			end := strings.Index(string(p[i:]), "\x1b\\")
			if end < 0 || !strings.HasPrefix(string(p[i:]), "]2;") {
				return fmt.Errorf("OSC at %d is not a title", i)
			}
			i += end + 1
		default:
			return fmt.Errorf("ESC %q at %d is not allowed", c, i)
		}
	}
	return nil
}

// allowedCSI reports whether a CSI sequence (parameters and final byte)
// is one a snapshot may contain.
func allowedCSI(seq string) bool {
	final := seq[len(seq)-1]
	params := seq[:len(seq)-1]
	if strings.ContainsAny(params, "$!\"'>=<") {
		return false
	}
	switch final {
	case 'm', 'H', 'r', 'g':
		return !strings.HasPrefix(params, "?")
	case 'h', 'l':
		return true
	case 'q':
		return strings.HasSuffix(params, " ")
	}
	return false
}
