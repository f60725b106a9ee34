package session

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Recording budgets and retention (recording.go writes the files). What
// the recordings directory holds is bounded in bytes and in files, for
// each tenant (by the tenant part of the names, castTenant) and in all.
// A recording being written counts as Config.RecordingMaxSize, what it
// may grow to, until it closes and counts as its size: so the budgets
// hold for the files on disk at every moment, whatever the recordings
// under way write. A start whose recording would pass a budget is
// refused (ErrRecordingBudget) before anything runs: a tenant that must
// be recorded is not run unrecorded, and one that asked knows at once.
//
// The directory is scanned when the supervisor starts, so the budgets
// count what earlier servers left, and then every quarter of the
// retention (at least every 100 ms, at most every minute): a recording
// whose last write is older than Config.RecordingsRetention is deleted
// then, unless it is still being written; a file removed by hand stops
// counting. With a state directory nothing is deleted before the end of
// Restore, which knows the recordings restored executions go on writing.
// Files that do not end in ".cast" are left alone and not counted.

// Defaults of the recording budgets and retention.
const (
	DefaultRecordingsMaxBytes         = 4 << 30
	DefaultRecordingsMaxFiles         = 10000
	DefaultRecordingsMaxBytesPerOwner = 1 << 30
	DefaultRecordingsMaxFilesPerOwner = 1000
	DefaultRecordingsRetention        = 7 * 24 * time.Hour
)

// ErrRecordingBudget is wrapped by the error of a start whose recording
// would pass a recording budget; it is an ErrCapacity.
var ErrRecordingBudget = fmt.Errorf("%w: recording budget spent", ErrCapacity)

// castUsage is what recordings take: bytes (a recording being written
// counted at its bound) and files.
type castUsage struct {
	bytes int64
	files int
}

func (u castUsage) add(v castUsage) castUsage {
	return castUsage{u.bytes + v.bytes, u.files + v.files}
}

// castBudget bounds what the recordings directory holds.
type castBudget struct {
	maxBytes, ownerBytes int64
	maxFiles, ownerFiles int
	retention            time.Duration // <= 0: recordings are kept
}

// castLedger counts what the recordings take. Guarded by castDir.mu.
type castLedger struct {
	total   castUsage
	tenants map[string]castUsage // by castTenant
	writing map[string]bool      // the names being written, counted at the bound
}

// addLocked counts u for name's tenant. Called with d.mu held.
func (d *castDir) addLocked(name string, u castUsage) {
	t := castTenantOf(name)
	d.total = d.total.add(u)
	if v := d.tenants[t].add(u); v.files > 0 {
		d.tenants[t] = v
	} else {
		delete(d.tenants, t)
	}
}

// reserve counts a recording about to be created as name, at its bound,
// or refuses it with ErrRecordingBudget.
func (d *castDir) reserve(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.refusalLocked(name); err != nil {
		return err
	}
	d.addLocked(name, castUsage{d.max, 1})
	d.writing[name] = true
	return nil
}

// refusalLocked says which budget a new recording named name would
// pass, if any. Called with d.mu held.
func (d *castDir) refusalLocked(name string) error {
	tenant := castTenantOf(name)
	b, own := d.budget, d.tenants[tenant]
	var who string
	var u castUsage
	var maxBytes int64
	var maxFiles int
	switch {
	case own.files >= b.ownerFiles || own.bytes+d.max > b.ownerBytes:
		who, u, maxBytes, maxFiles = "this tenant", own, b.ownerBytes, b.ownerFiles
	case d.total.files >= b.maxFiles || d.total.bytes+d.max > b.maxBytes:
		who, u, maxBytes, maxFiles, tenant = "the server", d.total, b.maxBytes, b.maxFiles, ""
	default:
		return nil
	}
	until := "an operator removes old ones"
	if b.retention > 0 {
		until = "old ones are deleted " + b.retention.String() + " after their last write"
	}
	if n := d.writingLocked(tenant); n > 0 {
		until = fmt.Sprintf("one of the %d being written ends (each counts as the %d bytes it may grow to until then), or %s", n, d.max, until)
	}
	return fmt.Errorf("%w: %s's recordings hold %d bytes in %d files, and its budget is %d bytes and %d files: no recorded start until %s",
		ErrRecordingBudget, who, u.bytes, u.files, maxBytes, maxFiles, until)
}

// writingLocked counts the recordings being written, of tenant (a
// castTenant), or of all when "". Called with d.mu held.
func (d *castDir) writingLocked(tenant string) int {
	n := 0
	for name := range d.writing {
		if tenant == "" || castTenantOf(name) == tenant {
			n++
		}
	}
	return n
}

// unreserve stops counting name, which reserve counted but was not
// created.
func (d *castDir) unreserve(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.writing[name] {
		delete(d.writing, name)
		d.addLocked(name, castUsage{-d.max, -1})
	}
}

// closed counts the recording name, which was being written, at its
// final size.
func (d *castDir) closed(name string, size int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.writing[name] {
		delete(d.writing, name)
		d.addLocked(name, castUsage{size - d.max, 0})
	}
}

// remove deletes the closed recording name, of size bytes, and stops
// counting it.
func (d *castDir) remove(name string, size int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.root.Remove(name) == nil {
		d.addLocked(name, castUsage{-size, -1})
	}
}

// reopened counts the recording name, of size bytes, which a restored
// execution goes on writing, at its bound again. It is not refused: the
// execution runs already.
func (d *castDir) reopened(name string, size int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.writing[name] {
		d.writing[name] = true
		d.addLocked(name, castUsage{d.max - size, 0})
	}
}

// scan counts the recordings on disk again, and with expire deletes
// those whose retention ended. It returns how many it deleted.
func (d *castDir) scan(expire bool) (deleted int) {
	dir, err := d.root.Open(".")
	if err != nil {
		return 0
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.castLedger = castLedger{tenants: map[string]castUsage{}, writing: d.writing}
	for name := range d.writing {
		d.addLocked(name, castUsage{d.max, 1})
	}
	now := time.Now()
	for _, name := range names {
		if !strings.HasSuffix(name, ".cast") || d.writing[name] {
			continue
		}
		fi, err := d.root.Lstat(name)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if expire && d.budget.retention > 0 && now.Sub(fi.ModTime()) > d.budget.retention && d.root.Remove(name) == nil {
			deleted++
			continue
		}
		d.addLocked(name, castUsage{fi.Size(), 1})
	}
	return deleted
}

// sweepEvery is how often the directory is scanned for a retention.
func sweepEvery(retention time.Duration) time.Duration {
	if retention <= 0 {
		return time.Minute
	}
	return min(max(retention/4, 100*time.Millisecond), time.Minute)
}

// startSweeping scans the directory, deleting what passed its retention,
// and goes on doing so in a goroutine until stopSweeping. Only its first
// call does anything.
func (d *castDir) startSweeping() {
	d.sweeping.Do(func() {
		d.sweep()
		go func() {
			defer close(d.swept)
			t := time.NewTicker(sweepEvery(d.budget.retention))
			defer t.Stop()
			for {
				select {
				case <-t.C:
					d.sweep()
				case <-d.stopSweep:
					return
				}
			}
		}()
	})
}

// sweep scans the directory, deleting what passed its retention.
func (d *castDir) sweep() {
	if n := d.scan(true); n > 0 {
		d.log.Info("recordings deleted at the end of their retention", "files", n, "retention", d.budget.retention.String())
	}
}

// stopSweeping stops the sweeping goroutine, if it runs, and waits for
// it.
func (d *castDir) stopSweeping() {
	started := true
	d.sweeping.Do(func() { started = false })
	d.stopOnce.Do(func() { close(d.stopSweep) })
	if started {
		<-d.swept
	}
}

// castDirSync is the state of castDir that its lock and sweeper hold.
type castDirSync struct {
	mu        sync.Mutex
	sweeping  sync.Once
	stopOnce  sync.Once
	stopSweep chan struct{}
	swept     chan struct{} // closed when the sweeping goroutine returned
}
