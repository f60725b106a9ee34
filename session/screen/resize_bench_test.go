package screen

import (
	"strings"
	"testing"
)

// BenchmarkResize measures one Resize, alternating between two sizes, as
// a client flooding resizes makes the emulator do: from a blank screen,
// from a screen full of text (the first shrink cuts it), and between
// sizes a row and a column apart on a full screen, whose content stays.
func BenchmarkResize(b *testing.B) {
	full := func(rows, cols int) []byte {
		line := strings.Repeat("x", cols)
		return []byte(strings.Repeat(line+"\r\n", rows-1) + line)
	}
	for _, bc := range []struct {
		name string
		a, b [2]int
		fill bool
	}{
		{"1000x1000-2x2/blank", [2]int{1000, 1000}, [2]int{2, 2}, false},
		{"1000x1000-2x2/full", [2]int{1000, 1000}, [2]int{2, 2}, true},
		{"1000x1000-999x999/full", [2]int{1000, 1000}, [2]int{999, 999}, true},
		{"25x80-24x80/full", [2]int{25, 80}, [2]int{24, 80}, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := New(Config{Rows: bc.a[0], Cols: bc.a[1]})
			if bc.fill {
				s.Write(full(bc.a[0], bc.a[1]))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					s.Resize(bc.b[0], bc.b[1])
				} else {
					s.Resize(bc.a[0], bc.a[1])
				}
			}
		})
	}
}
