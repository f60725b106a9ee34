package promtext

import (
	"bytes"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parse reads out with Prometheus's Go text parser: it refuses a bad
// escape, value or type, and a family's HELP or TYPE twice.
func parse(t *testing.T, out []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses the output: %v\n%s", err, out)
	}
	return fams
}

func TestWriterIsReadByPrometheus(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	w.One("a_total", "Help with a \\ backslash\nand a line feed.", Counter, 3)
	w.Family("b", "Labelled.", Gauge)
	w.Sample("b", 1.5, "k", `quote " backslash \ line`+"\n", "z", "plain")
	w.Sample("b", math.Inf(1), "k", "inf")
	w.Sample("b", 1e21, "k", "big")
	w.Histogram("h_seconds", "A histogram.", []float64{0.005, 0.5, 2}, []uint64{1, 0, 2, 4}, 12.25)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, b.Bytes())

	a := fams["a_total"]
	if a.GetHelp() != "Help with a \\ backslash\nand a line feed." || a.GetType() != dto.MetricType_COUNTER || a.Metric[0].GetCounter().GetValue() != 3 {
		t.Errorf("a_total: %v", a)
	}
	got := map[string]float64{}
	for _, m := range fams["b"].Metric {
		got[m.Label[0].GetValue()] = m.GetGauge().GetValue()
		if len(m.Label) == 2 && m.Label[1].GetValue() != "plain" {
			t.Errorf("second label: %v", m.Label)
		}
	}
	want := map[string]float64{`quote " backslash \ line` + "\n": 1.5, "inf": math.Inf(1), "big": 1e21}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("b{k=%q} = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	h := fams["h_seconds"].Metric[0].GetHistogram()
	if h.GetSampleCount() != 7 || h.GetSampleSum() != 12.25 {
		t.Errorf("histogram count %d sum %v, want 7 and 12.25", h.GetSampleCount(), h.GetSampleSum())
	}
	var cum []uint64
	for _, bk := range h.Bucket {
		cum = append(cum, bk.GetCumulativeCount())
	}
	if !slices.Equal(cum, []uint64{1, 1, 3, 7}) {
		t.Errorf("cumulative buckets %v, want [1 1 3 7] (the last +Inf)", cum)
	}
}

// TestRuntimeAndProcess: the families under the names dashboards know,
// each parsed, with figures that are plausible for this process.
func TestRuntimeAndProcess(t *testing.T) {
	runtime.GC() // a collection, so the pause summary and last GC are set
	var b bytes.Buffer
	w := NewWriter(&b)
	WriteGo(w)
	WriteProcess(w)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, b.Bytes())
	value := func(name string) float64 {
		f := fams[name]
		if f == nil || len(f.Metric) == 0 {
			t.Errorf("no %s in\n%s", name, b.Bytes())
			return math.NaN()
		}
		m := f.Metric[0]
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		case dto.MetricType_SUMMARY:
			return float64(m.GetSummary().GetSampleCount())
		}
		return math.NaN()
	}
	for name, ok := range map[string]func(float64) bool{
		"go_goroutines":                    func(v float64) bool { return v >= 1 },
		"go_threads":                       func(v float64) bool { return v >= 1 },
		"go_gc_duration_seconds":           func(v float64) bool { return v >= 1 },
		"go_memstats_heap_alloc_bytes":     func(v float64) bool { return v > 0 },
		"go_memstats_alloc_bytes_total":    func(v float64) bool { return v > 0 },
		"go_memstats_sys_bytes":            func(v float64) bool { return v > 0 },
		"go_memstats_last_gc_time_seconds": func(v float64) bool { return v > 1.7e9 },
		"go_gc_gogc_percent":               func(v float64) bool { return v != 0 },
		"go_sched_gomaxprocs_threads":      func(v float64) bool { return v == float64(runtime.GOMAXPROCS(0)) },
	} {
		if v := value(name); !ok(v) {
			t.Errorf("%s = %v", name, v)
		}
	}
	if fams["go_info"] == nil || fams["go_info"].Metric[0].Label[0].GetValue() != runtime.Version() {
		t.Errorf("go_info: %v", fams["go_info"])
	}
	if runtime.GOOS != "linux" {
		return
	}
	for name, ok := range map[string]func(float64) bool{
		"process_cpu_seconds_total":     func(v float64) bool { return v > 0 },
		"process_open_fds":              func(v float64) bool { return v >= 3 },
		"process_max_fds":               func(v float64) bool { return v >= 64 },
		"process_resident_memory_bytes": func(v float64) bool { return v > 1<<20 },
		"process_virtual_memory_bytes":  func(v float64) bool { return v > 1<<20 },
		"process_start_time_seconds":    func(v float64) bool { return v > 1.7e9 },
	} {
		if v := value(name); !ok(v) {
			t.Errorf("%s = %v", name, v)
		}
	}
	if !strings.Contains(b.String(), "process_virtual_memory_max_bytes ") {
		t.Errorf("no process_virtual_memory_max_bytes")
	}
}

// TestWriterRefusesMisuse: labels not in pairs and a histogram short of
// counts are the caller's bugs, refused at once; a label value that is
// not UTF-8 is written as U+FFFD, since a Prometheus server refuses a
// whole scrape for one.
func TestWriterRefusesMisuse(t *testing.T) {
	for name, f := range map[string]func(w *Writer){
		"odd labels":      func(w *Writer) { w.Sample("x", 1, strings.Fields("k")...) }, // built, not literal: staticcheck refuses a literal
		"short histogram": func(w *Writer) { w.Histogram("h", "", []float64{1, 2}, []uint64{1}, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f(NewWriter(io.Discard))
		}()
	}
	var b bytes.Buffer
	w := NewWriter(&b)
	w.Family("x", "A.", Gauge)
	w.Sample("x", 1, "k", "a\xffb")
	w.Flush()
	fams := parse(t, b.Bytes())
	if got := fams["x"].Metric[0].Label[0].GetValue(); got != "a\uFFFDb" {
		t.Errorf("label value %q, want a U+FFFD b", got)
	}
}
