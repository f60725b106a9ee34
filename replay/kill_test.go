package replay

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The child of TestKillWriter: it appends into a ring in a MAP_SHARED
// mapping of the file named by this variable until it is killed.
const killChildEnv = "REPLAY_KILL_CHILD"

// killCfg bounds the rings of TestKillWriter: small, so that they wrap
// and evict within milliseconds.
var killCfg = Config{MaxBytes: 64 << 10, MaxEvents: 64}

// streamByte is byte o of stream s in TestKillWriter: every retained
// output is checked against it.
func streamByte(s Stream, o uint64) byte { return byte(o*2654435761>>7) ^ byte(s)*37 }

func mapFile(t testing.TB, path string, size int, create bool) []byte {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE | os.O_EXCL
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if create {
		if err := f.Truncate(int64(size)); err != nil {
			t.Fatal(err)
		}
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// TestKillWriterChild is the writer: it is not a test of its own. It
// appends output, reads output from a pipe straight into reserved ring
// memory in pieces, appends control events, and prints each published sequence.
func TestKillWriterChild(t *testing.T) {
	path := os.Getenv(killChildEnv)
	if path == "" {
		t.Skip("the child of TestKillWriter")
	}
	cfg := killCfg
	cfg.Memory = mapFile(t, path, MemorySize(cfg), false)
	r := New(cfg)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	var off [StreamStderr + 1]uint64
	gen := func(s Stream, n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = streamByte(s, off[s]+uint64(i))
		}
		off[s] += uint64(n)
		return p
	}
	for i := 0; ; i++ {
		var seq uint64
		s := Stream(1 + rnd.IntN(3))
		switch k := rnd.IntN(10); {
		case k < 4:
			seq, err = r.AppendOutput(s, gen(s, 1+rnd.IntN(4<<10)))
		case k < 8:
			seq, err = readPieces(r, pr, pw, s, gen(s, 1+rnd.IntN(8<<10)), rnd)
		default:
			seq, err = r.Append(Event{Kind: KindResize, Rows: uint16(1 + i%500), Cols: 80})
		}
		if err != nil {
			t.Fatal(err)
		}
		r.Word(0).Store(seq)
		fmt.Println(seq) // unbuffered: what is logged was published
	}
}

// readPieces writes data to a pipe and reads it back straight into a
// reservation of the ring, in one to four pieces, each by one read that
// fills it, as the sandbox reads a burst of output.
func readPieces(r *Ring, pr, pw *os.File, s Stream, data []byte, rnd *rand.Rand) (uint64, error) {
	if _, err := pw.Write(data); err != nil {
		return 0, err
	}
	if _, err := r.Reserve(s, len(data)+rnd.IntN(MaxReserve-len(data)+1)); err != nil {
		return 0, err
	}
	for done, pieces := 0, 1+rnd.IntN(4); done < len(data); pieces-- {
		k := len(data) - done
		if pieces > 1 {
			k = 1 + rnd.IntN(k)
		}
		mem, err := r.Extend(k)
		if err != nil {
			return 0, err
		}
		if got, err := syscall.Read(int(pr.Fd()), mem); got != k || err != nil {
			return 0, fmt.Errorf("read %d of %d: %w", got, k, err)
		}
		done += k
	}
	return r.Commit(s, len(data))
}

// TestKillWriter kills a writer process with SIGKILL at random times, 100
// times, and checks that each ring recovers consistent and holding at
// least what the writer logged as published, every byte of it right.
func TestKillWriter(t *testing.T) {
	if os.Getenv(killChildEnv) != "" {
		t.Skip("the child")
	}
	t.Parallel()
	dir := t.TempDir()
	rounds := 100
	if testing.Short() {
		rounds = 10
	}
	ahead, events := 0, uint64(0)
	defer func() {
		t.Logf("%d rounds, %d events recovered, %d rounds with one more event than logged", rounds, events, ahead)
	}()
	for round := range rounds {
		path := filepath.Join(dir, fmt.Sprint("ring", round))
		size := MemorySize(killCfg)
		mem := mapFile(t, path, size, true)
		logged := runKilled(t, path, time.Duration(1+rand.IntN(30))*time.Millisecond)
		cfg := killCfg
		cfg.Memory = mem
		r, err := Recover(cfg)
		if err != nil {
			t.Fatalf("round %d: recover: %v", round, err)
		}
		_, last := r.Bounds()
		if last < logged || last > logged+1 {
			t.Fatalf("round %d: recovered up to %d, the writer logged %d", round, last, logged)
		}
		if last > logged {
			ahead++
		}
		events += last
		if w := r.Word(0).Load(); w < logged || w > last {
			t.Fatalf("round %d: word %d, logged %d, recovered %d", round, w, logged, last)
		}
		checkStreams(t, r)
		// The recovered ring goes on.
		if _, err := r.AppendOutput(StreamPTY, []byte("after")); err != nil {
			t.Fatal(err)
		}
		checkRecovered(t, r, cfg)
		if err := syscall.Munmap(mem); err != nil {
			t.Fatal(err)
		}
		os.Remove(path)
	}
}

// runKilled runs the writer on path, kills it d after it logged its
// first event, and returns the last sequence it logged.
func runKilled(t *testing.T, path string, d time.Duration) uint64 {
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillWriterChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), killChildEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 1)
	stdout.(*os.File).SetReadDeadline(time.Now().Add(time.Minute))
	n, _ := stdout.Read(first) // the writer has begun
	// Only then the rest, by one reader: two at once could each take
	// part of the log, and the last line read would not be the last one
	// written.
	lines := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(stdout)
		lines <- b
	}()
	time.Sleep(d)
	cmd.Process.Signal(syscall.SIGKILL)
	out := append(first[:n], <-lines...)
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer: %v, want killed; stderr %s, stdout %.300s", err, stderr.String(), out)
	}
	var logged uint64
	for _, line := range bytes.Split(out, []byte("\n")) {
		if n, err := strconv.ParseUint(string(line), 10, 64); err == nil {
			logged = n
		}
	}
	return logged
}

// checkStreams checks every retained event: sequences without gaps,
// output at consecutive offsets of its stream and equal to it.
func checkStreams(t *testing.T, r *Ring) {
	t.Helper()
	evs, _ := r.Read(nil, 0, 0, 0)
	var ends [StreamStderr + 1]uint64
	seen := [StreamStderr + 1]bool{}
	for i, ev := range evs {
		if i > 0 && ev.Seq != evs[i-1].Seq+1 {
			t.Fatalf("sequence %d after %d", ev.Seq, evs[i-1].Seq)
		}
		if ev.Kind != KindOutput {
			continue
		}
		if seen[ev.Stream] && ev.Offset != ends[ev.Stream] {
			t.Fatalf("seq %d: %s offset %d, the stream ended at %d", ev.Seq, ev.Stream, ev.Offset, ends[ev.Stream])
		}
		for j, c := range ev.Data {
			if c != streamByte(ev.Stream, ev.Offset+uint64(j)) {
				t.Fatalf("seq %d: %s byte %d wrong", ev.Seq, ev.Stream, ev.Offset+uint64(j))
			}
		}
		seen[ev.Stream], ends[ev.Stream] = true, ev.Offset+uint64(len(ev.Data))
	}
}
