// Package promtext writes Prometheus's text exposition format (version
// 0.0.4): families of counters, gauges, summaries and histograms, with
// their HELP and TYPE lines, read at scrape time.
//
// termgate's metrics are a few dozen figures it already keeps; writing
// them is all a scrape needs. A client library would add its registry,
// the Go runtime's and the process's collectors and their dependencies
// to every start of the termgate binary, client commands included:
// 2.4 ms of a 15 ms start on the machine measured (docs/performance.md).
//
// OpenFiles, the count behind process_open_fds, is also what serve's
// descriptor headroom reads as connections arrive.
package promtext

import (
	"bufio"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ContentType is the text format's media type.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Types of a family.
const (
	Counter   = "counter"
	Gauge     = "gauge"
	Summary   = "summary"
	Histogram = "histogram"
)

// Writer writes families to an io.Writer. The first error is kept and
// returned by Flush; writes after it do nothing.
type Writer struct {
	w   *bufio.Writer
	buf []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Family starts a family: its HELP and TYPE lines. Its samples follow.
func (w *Writer) Family(name, help, typ string) {
	b := append(w.buf[:0], "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = appendEscaped(b, help, false)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	b = append(b, '\n')
	w.buf = b
	w.w.Write(b)
}

// Sample writes one sample of the family begun last: name (the family's,
// or with _bucket, _sum or _count), its labels as name, value pairs, and
// its value. Names are the caller's constants: they are not checked, and
// labels must come in pairs.
func (w *Writer) Sample(name string, v float64, labels ...string) {
	if len(labels)%2 != 0 {
		panic("promtext: labels of " + name + " are not name, value pairs")
	}
	b := append(w.buf[:0], name...)
	if len(labels) > 0 {
		b = append(b, '{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, labels[i]...)
			b = append(b, `="`...)
			b = appendEscaped(b, labels[i+1], true)
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = appendValue(b, v)
	b = append(b, '\n')
	w.buf = b
	w.w.Write(b)
}

// One writes a family of a single sample without labels.
func (w *Writer) One(name, help, typ string, v float64) {
	w.Family(name, help, typ)
	w.Sample(name, v)
}

// Histogram writes a histogram family without labels: bounds are the
// buckets' upper bounds, ascending; counts[i] the observations in
// bucket i alone (not cumulative), and len(counts) is len(bounds) or one
// more for those above the last bound.
func (w *Writer) Histogram(name, help string, bounds []float64, counts []uint64, sum float64) {
	if len(counts) < len(bounds) {
		panic("promtext: histogram " + name + " has fewer counts than bounds")
	}
	w.Family(name, help, Histogram)
	var cum uint64
	for i, le := range bounds {
		cum += counts[i]
		w.Sample(name+"_bucket", float64(cum), "le", string(appendValue(nil, le)))
	}
	for _, n := range counts[len(bounds):] {
		cum += n
	}
	w.Sample(name+"_bucket", float64(cum), "le", "+Inf")
	w.Sample(name+"_sum", sum)
	w.Sample(name+"_count", float64(cum))
}

// Flush writes what is buffered and returns the first error.
func (w *Writer) Flush() error { return w.w.Flush() }

// appendValue writes v as the format's parsers read it: Go's shortest
// representation, and +Inf, -Inf and NaN by name.
func appendValue(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// appendEscaped escapes a backslash and a line feed (HELP text), and in a
// label value a double quote too. Bytes that are not UTF-8 become U+FFFD:
// a Prometheus server refuses a whole scrape for one.
func appendEscaped(b []byte, s string, quote bool) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if !strings.ContainsAny(s, "\\\n\"") {
		return append(b, s...)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}
