package audit

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/termgate/termgate/gateway/gatewaytest"
	"github.com/termgate/termgate/gateway/internal/rate"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// readAudit reads every record of the trail at path, oldest first.
func readAudit(t *testing.T, path string, keep int) []map[string]any {
	t.Helper()
	return gatewaytest.AuditRecords(t, Files(path, keep), MaxRecordSize)
}

func TestOpenAuditRefusesUnsafePaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, nil, 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	shared := filepath.Join(dir, "shared")
	os.WriteFile(shared, nil, 0o600)
	os.Chmod(shared, 0o620) // group-writable
	world := filepath.Join(dir, "world")
	os.WriteFile(world, nil, 0o600)
	os.Chmod(world, 0o602)
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o600)
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"symlink", Config{Path: link}, "symlink"},
		{"group-writable", Config{Path: shared}, "writable by others"},
		{"world-writable", Config{Path: world}, "writable by others"},
		{"device", Config{Path: "/dev/full"}, "not a regular file"},
		{"fifo", Config{Path: fifo}, "not a regular file"},
		{"directory", Config{Path: dir}, "is a directory"},
		{"missing directory", Config{Path: filepath.Join(dir, "nope", "audit.log")}, "no such file"},
		{"no path", Config{}, "path is required"},
		{"tiny", Config{Path: target, MaxSize: 1000}, "below the minimum"},
		{"keep negative", Config{Path: target, Keep: -1}, "keep -1"},
		{"keep huge", Config{Path: target, Keep: MaxKeep + 1}, "keep 1001"},
	} {
		a, err := Open(c.cfg)
		if err == nil {
			a.Close()
			t.Errorf("%s: Open(%+v) accepted it", c.name, c.cfg)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q, want it to say %q", c.name, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); err == nil {
		t.Error("Open created the missing directory")
	}
}

// TestAuditFileMode: the trail and its rotated files are 0600 whatever
// the umask, and a record is written with the file's O_APPEND.
func TestAuditFileMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := Open(Config{Path: path, MaxSize: MinMaxSize, Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 2000 {
		if err := a.Record(&Record{Event: "start", Execution: fmt.Sprint("x", i), Argv: []string{"/bin/sh", "-c", "true"}}); err != nil {
			t.Fatal(err)
		}
	}
	files := Files(path, 3)
	if len(files) != 4 {
		t.Fatalf("files %v: want PATH.3 to PATH", files)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", f, fi.Mode().Perm(), err)
		}
	}
	fl, _ := syscallFlags(a)
	if fl&syscall.O_APPEND == 0 {
		t.Errorf("the trail is open without O_APPEND (flags %#x)", fl)
	}
}

// syscallFlags reads the open flags of the trail's descriptor.
func syscallFlags(a *Log) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", a.f.Fd()))
	if err != nil {
		return 0, err
	}
	var flags int
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "flags:"); ok {
			fmt.Sscanf(strings.TrimSpace(v), "%o", &flags)
		}
	}
	return flags, nil
}

// TestAuditRotationKeepsEveryRecord: writers racing across many
// rotations lose no record, split none, and no file passes MaxSize.
func TestAuditRotationKeepsEveryRecord(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	const keep, writers, each = 100, 4, 1500
	a, err := Open(Config{Path: path, MaxSize: MinMaxSize, Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				// Records of different sizes, so a bound is crossed at any point.
				argv := []string{"/bin/sh", "-c", strings.Repeat("y", (i*37)%900)}
				if err := a.Record(&Record{Event: "start", Execution: fmt.Sprintf("w%d-%d", w, i), Argv: argv}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	files := Files(path, keep)
	if len(files) < 10 || len(files) > keep {
		t.Fatalf("%d files: want many rotations, within keep", len(files))
	}
	for _, f := range files {
		if fi, _ := os.Stat(f); fi.Size() > MinMaxSize {
			t.Errorf("%s holds %d bytes, over the %d bound", f, fi.Size(), MinMaxSize)
		}
	}
	seen := map[string]bool{}
	for _, r := range readAudit(t, path, keep) {
		id, _ := r["execution"].(string)
		if seen[id] {
			t.Errorf("record %s twice", id)
		}
		seen[id] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d records across %d files, want %d", len(seen), len(files), writers*each)
	}
}

// TestAuditRotationDropsOnlyBeyondKeep: with Keep files the oldest
// file goes, and only it.
func TestAuditRotationDropsOnlyBeyondKeep(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := Open(Config{Path: path, MaxSize: MinMaxSize, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 3000 {
		a.Record(&Record{Event: "start", Execution: fmt.Sprint(i)})
	}
	recs := readAudit(t, path, 2)
	if len(Files(path, 5)) != 3 || recs[len(recs)-1]["execution"] != "2999" {
		t.Fatalf("files %v, last record %v", Files(path, 5), recs[len(recs)-1])
	}
}

// TestAuditFollowsRemovedFile: a trail removed under the server is made
// again, so records never go to a file nobody can read; a directory
// removed fails writes until it is back, logged once per streak.
func TestAuditFollowsRemovedFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "audit")
	os.Mkdir(dir, 0o700)
	path := filepath.Join(dir, "audit.log")
	var logs sandboxtest.SyncBuffer
	a, err := Open(Config{Path: path, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rec := func(id string) error { return a.Record(&Record{Event: "start", Execution: id}) }
	rec("one")
	os.Remove(path)
	if err := rec("two"); err != nil {
		t.Fatal(err)
	}
	if recs := readAudit(t, path, 1); len(recs) != 1 || recs[0]["execution"] != "two" {
		t.Fatalf("after removal the trail holds %v", recs)
	}
	os.RemoveAll(dir)
	for _, id := range []string{"three", "four"} {
		if err := rec(id); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("record %s without a directory: %v, want ErrUnavailable", id, err)
		}
	}
	if n := strings.Count(logs.String(), "audit trail cannot be written"); n != 1 {
		t.Fatalf("%d error lines for one streak of failures, want 1:\n%s", n, logs.String())
	}
	os.Mkdir(dir, 0o700)
	if err := rec("five"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "audit trail written again") {
		t.Fatalf("no recovery line:\n%s", logs.String())
	}
}

// TestAuditRefusalsAreBounded: a flood of refused requests writes at
// most the refusal burst, and the next record says how many it left
// out; actions are never left out.
func TestAuditRefusalsAreBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := Open(Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const flood = 3 * refusalBurst
	a.refusals = rate.NewBucket(0, refusalBurst) // no time passes
	for range flood {
		a.Refused(&Record{Event: "attach"}, wire.CodeNotFound, nil)
	}
	a.refusals = rate.NewBucket(1, 1) // time passed
	a.Refused(&Record{Event: "attach"}, wire.CodeNotFound, nil)
	recs := readAudit(t, path, 1)
	last := recs[len(recs)-1]
	if len(recs) != refusalBurst+1 || last["suppressed"] == nil ||
		int(last["suppressed"].(float64))+len(recs) != flood+1 {
		t.Fatalf("%d records, the last %v: want at most the burst, and the rest counted", len(recs), last)
	}
}
