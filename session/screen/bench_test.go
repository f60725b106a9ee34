package screen

import (
	"bytes"
	"cmp"
	"fmt"
	"strings"
	"testing"
)

// scrollingLines is 32 KiB of 78-byte lines (77 characters and \n after
// a \r, as a PTY sends them).
func scrollingLines() []byte {
	var b strings.Builder
	for i := 0; b.Len() < 32<<10; i++ {
		fmt.Fprintf(&b, "%-76.76s\r\n", strings.Repeat(fmt.Sprint(i), 20))
	}
	return []byte(b.String()[:32<<10])
}

// yesLines is 32 KiB of the 74-byte lines (72 characters, \r\n) that
// the gateway's throughput benchmark prints with yes.
func yesLines() []byte {
	line := "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz\r\n"
	return []byte(strings.Repeat(line, 32<<10/len(line)+1)[:32<<10])
}

// cursorUpdates is 32 KiB of cursor-addressed coloured updates.
func cursorUpdates() []byte {
	var b strings.Builder
	for i := 0; b.Len() < 32<<10; i++ {
		fmt.Fprintf(&b, "\x1b[%d;%dH\x1b[38;5;%dm%05d", i%24+1, i*7%70+1, i%256, i)
	}
	return []byte(b.String()[:32<<10])
}

// BenchmarkWrite measures writing 32 KiB of output to a screen whose
// scrollback is full, with the skip of scrolled-off lines on and off.
func BenchmarkWrite(b *testing.B) {
	for _, bc := range []struct {
		name  string
		data  []byte
		cfg   Config
		chunk int // bytes per Write, if not the whole data
	}{
		{"scrolling/scrollback=1000", scrollingLines(), Config{Rows: 24, Cols: 80, Scrollback: 1000}, 0},
		{"scrolling/scrollback=100", scrollingLines(), Config{Rows: 24, Cols: 80, Scrollback: 100}, 0},
		{"yes/scrollback=1000", yesLines(), Config{Rows: 24, Cols: 80, Scrollback: 1000}, 0},
		{"yes/scrollback=1000/writes=4KiB", yesLines(), Config{Rows: 24, Cols: 80, Scrollback: 1000}, 4 << 10},
		{"cursor/scrollback=1000", cursorUpdates(), Config{Rows: 24, Cols: 80, Scrollback: 1000}, 0},
	} {
		for _, fast := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/skip=%v", bc.name, fast), func(b *testing.B) {
				s := New(bc.cfg)
				s.skipOff = !fast
				b.SetBytes(int64(len(bc.data)))
				chunk := cmp.Or(bc.chunk, len(bc.data))
				write := func() {
					for p := bc.data; len(p) > 0; p = p[min(chunk, len(p)):] {
						s.Write(p[:min(chunk, len(p))])
					}
				}
				for range fillWrites(bc.data, bc.cfg) {
					write()
				}
				skipped := s.skipped
				for b.Loop() {
					write()
				}
				if fast != (s.skipped > skipped) && bc.name != "cursor/scrollback=1000" {
					b.Fatalf("skipped %d bytes", s.skipped-skipped)
				}
			})
		}
	}
}

// fillWrites is how many writes of data fill a screen of cfg and its
// scrollback, so that every timed write finds them full, as a running
// terminal's do, even at -benchtime=1x.
func fillWrites(data []byte, cfg Config) int {
	lines := bytes.Count(data, []byte("\n"))
	if lines == 0 {
		return 0
	}
	return (cfg.Rows+cfg.Scrollback)/lines + 1
}

func BenchmarkSnapshot(b *testing.B) {
	for _, size := range [][2]int{{24, 80}, {80, 250}} {
		b.Run(fmt.Sprintf("%dx%d", size[1], size[0]), func(b *testing.B) {
			s := New(Config{Rows: size[0], Cols: size[1], Scrollback: 10_000})
			line := "\x1b[32m$\x1b[m " + strings.Repeat("coloured \x1b[1;34mwords\x1b[m and plain text ", size[1]/40)
			for i := range 10_000 + size[0] {
				fmt.Fprintf(writer{s}, "%d %s\r\n", i, line)
			}
			var dst []byte
			for b.Loop() {
				dst = s.Snapshot(dst[:0])
			}
			b.ReportMetric(float64(len(dst)), "snapshot-bytes")
			b.ReportMetric(float64(s.MemoryBytes()), "memory-bytes")
		})
	}
}
