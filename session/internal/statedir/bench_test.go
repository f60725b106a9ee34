package statedir

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/replay"
)

// BenchmarkDurableStorage makes a durable execution's ring, input log
// and first record in a state directory under the test's temporary one,
// as each start does, and appends its first event, which touches the ring's first
// page. It reports the process's CPU per execution (cpu-us/op),
// kernel time included: what a start costs the server, on the file
// system the state directory is on.
func BenchmarkDurableStorage(b *testing.B) {
	root := b.TempDir()
	cpu0 := processCPU()
	i := 0
	for b.Loop() {
		dir := filepath.Join(root, fmt.Sprint("x", i))
		i++
		if err := os.Mkdir(dir, 0o700); err != nil {
			b.Fatal(err)
		}
		r, err := NewRing(dir, RingBounds(replay.Config{}))
		if err != nil {
			b.Fatal(err)
		}
		r.Append(replay.Event{Kind: replay.KindStarted, Rows: 24, Cols: 80})
		r.Append(replay.Event{Kind: replay.KindOutput, Stream: replay.StreamPTY, Data: []byte("sandbox@termgate:~$ ")})
		in, err := mapFile(dir, "input", InputLogSize(0), true)
		if err != nil {
			b.Fatal(err)
		}
		in[0] = 1
		syscall.Munmap(in)
		rec := &Record[struct{}, struct{}]{Owner: "t", ID: dir, Incarnation: "i", Ring: RingBounds(replay.Config{}), Started: time.Now()}
		if err := WriteRecord(dir, rec, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// processCPU is this process's user and system time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
