// Package audit writes termgate's audit trail: an append-only JSON-lines
// file of who did what to which execution, and of every refusal.
// README.md, "Audit trail", is its contract for operators; which record
// each request writes, and when, is the gateway's (its audit_events.go).
//
// Invariants:
//   - one record is one line, written with one write(2) on a file opened
//     with O_APPEND; a short write is cut back, so the file only ever
//     holds whole lines;
//   - the file never grows past MaxSize: a record that would cross it
//     goes to a fresh file after PATH is rotated to PATH.1 (PATH.1 to
//     PATH.2, and so on up to Keep files; the oldest is then dropped);
//   - it fails closed: Record's error means refuse the action (the
//     gateway answers code unavailable), and what cannot be refused any
//     more (an execution that ended, a channel that closed) is counted as
//     Lost and logged;
//   - no token, secret, environment value or terminal byte is ever
//     written: sizes are, and the command line is (JSON-escaped, the
//     C0 and C1 controls and DEL as \u00XX).
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/termgate/termgate/gateway/internal/rate"
	"github.com/termgate/termgate/gateway/wire"
)

// Defaults and bounds of Config.
const (
	DefaultMaxSize = 100 << 20
	DefaultKeep    = 10
	// MinMaxSize is the smallest MaxSize: room for a few hundred
	// records, and for the largest one (MaxRecordSize).
	MinMaxSize = 64 << 10
	// MaxKeep bounds the rotated files kept.
	MaxKeep = 1000
	// MaxRecordSize bounds one record, its newline included: a longer
	// command line is left out of it (argv_truncated) rather than
	// written in part.
	MaxRecordSize = 16 << 10
)

// Errors of the audit trail.
var (
	// ErrUnsafe refuses an audit path a symlink, a file that is not
	// regular, or a file others can write.
	ErrUnsafe = errors.New("gateway: audit log path is unsafe")
	// ErrUnavailable is the refusal of a request whose record could
	// not be written.
	ErrUnavailable = errors.New("gateway: the audit trail cannot be written")
)

// Config configures Open.
type Config struct {
	// Path is the audit file; its directory must exist. Required.
	Path string
	// MaxSize bounds each file in bytes (DefaultMaxSize; at least
	// MinMaxSize).
	MaxSize int64
	// Keep is how many rotated files (Path.1 ... Path.Keep) are kept
	// (DefaultKeep; 1 to MaxKeep).
	Keep int
	// Logger gets one error per streak of failed writes, and a line
	// when writes succeed again.
	Logger *slog.Logger
}

// Log is an open audit trail. It is safe for concurrent use; it has
// no goroutine of its own.
type Log struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	f       *os.File
	size    int64
	failing bool // the last write failed: the next success is logged
	closed  bool

	lost atomic.Uint64 // records that could not be written and refused nothing
	// refusals bounds the rate of refusal records, so that a flood of
	// refused requests cannot rotate the history of actions away;
	// suppressed counts the ones left out, reported by the next one.
	refusals   *rate.Bucket
	suppressed atomic.Uint64
}

// Rate of refusal records: a burst of refusalBurst, then
// refusalRate a second.
const (
	refusalRate  = 50
	refusalBurst = 500
)

// Open opens (or creates, mode 0600) the audit file at cfg.Path for
// appending. It refuses a path that is a symlink, not a regular file, or
// writable by group or others, and a directory that does not exist.
func Open(cfg Config) (*Log, error) {
	if cfg.Path == "" {
		return nil, errors.New("gateway: audit config: a path is required")
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = DefaultMaxSize
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.MaxSize < MinMaxSize {
		return nil, fmt.Errorf("gateway: audit config: max size %d is below the minimum %d", cfg.MaxSize, MinMaxSize)
	}
	if cfg.Keep < 1 || cfg.Keep > MaxKeep {
		return nil, fmt.Errorf("gateway: audit config: keep %d is not between 1 and %d", cfg.Keep, MaxKeep)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Log{cfg: cfg, log: cfg.Logger, refusals: rate.NewBucket(refusalRate, refusalBurst)}
	if err := a.open(); err != nil {
		return nil, err
	}
	return a, nil
}

// open opens the file at the path, refusing an unsafe one. Called with
// a.mu held, or before a is shared.
func (a *Log) open() error {
	// O_NONBLOCK: a FIFO without a reader is refused (ENXIO) rather than
	// waited for; it changes nothing for a regular file.
	f, err := os.OpenFile(a.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0o600)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: %s is a symlink", ErrUnsafe, a.cfg.Path)
	case errors.Is(err, syscall.ENXIO):
		return fmt.Errorf("%w: %s is not a regular file", ErrUnsafe, a.cfg.Path)
	}
	if err != nil {
		return fmt.Errorf("open audit log: %w", err)
	}
	fi, err := f.Stat()
	if err == nil {
		err = safeFile(a.cfg.Path, fi)
	}
	if err != nil {
		f.Close()
		return err
	}
	a.f, a.size = f, fi.Size()
	return nil
}

// safeFile refuses a file that is not regular or that group or
// others can write.
func safeFile(path string, fi os.FileInfo) error {
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", ErrUnsafe, path)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: %s is writable by others (mode %v)", ErrUnsafe, path, fi.Mode().Perm())
	}
	return nil
}

// Close closes the file; later writes fail with ErrUnavailable. A
// nil Log (no trail) closes as nothing.
func (a *Log) Close() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	return a.f.Close()
}

// Lost counts the records that could not be written about something
// that had already happened (an execution's end, a channel's close).
func (a *Log) Lost() uint64 { return a.lost.Load() }

// write appends one record; it fails with ErrUnavailable (wrapping
// the cause) when the record is not in the file whole.
func (a *Log) write(r *Record) error {
	r.Time = time.Now().UTC().Format(time.RFC3339Nano)
	line, err := r.encode()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	err = a.appendLocked(line)
	a.noteLocked(err)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// noteLocked logs the first failure of a streak, and its end.
func (a *Log) noteLocked(err error) {
	switch {
	case err != nil && !a.failing:
		a.failing = true
		a.log.Error("audit trail cannot be written: refusing what it would record", "path", a.cfg.Path, "err", err)
	case err == nil && a.failing:
		a.failing = false
		a.log.Info("audit trail written again", "path", a.cfg.Path)
	}
}

// appendLocked writes line to the current file, reopening the path when
// the file was removed or replaced, and rotating first when line would
// take it past MaxSize.
func (a *Log) appendLocked(line []byte) error {
	if a.closed {
		return errors.New("the audit log is closed")
	}
	if err := a.followLocked(); err != nil {
		return err
	}
	if a.size > 0 && a.size+int64(len(line)) > a.cfg.MaxSize {
		if err := a.rotateLocked(); err != nil {
			return err
		}
	}
	n, err := a.f.Write(line)
	if err != nil || n != len(line) {
		if n > 0 { // never leave part of a line behind
			if terr := a.f.Truncate(a.size); terr != nil {
				err = errors.Join(err, fmt.Errorf("cut back a partial record: %w", terr))
			}
		}
		return cmpErr(err, fmt.Errorf("short write of %d of %d bytes", n, len(line)))
	}
	a.size += int64(n)
	return nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// followLocked reopens the path when the open file is no longer the one
// there (removed, or renamed by another tool), so records never go to a
// file nobody can read.
func (a *Log) followLocked() error {
	cur, err := a.f.Stat()
	if err != nil {
		return fmt.Errorf("stat audit log: %w", err)
	}
	at, err := os.Lstat(a.cfg.Path)
	if err == nil && os.SameFile(cur, at) {
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stat audit log: %w", err)
	}
	old := a.f
	if err := a.open(); err != nil {
		return err
	}
	old.Close()
	return nil
}

// rotateLocked moves PATH.i to PATH.i+1 (dropping PATH.Keep), PATH to
// PATH.1, and opens a fresh PATH.
func (a *Log) rotateLocked() error {
	p := a.cfg.Path
	for i := a.cfg.Keep - 1; i >= 1; i-- {
		if err := os.Rename(rotated(p, i), rotated(p, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotate audit log: %w", err)
		}
	}
	if err := os.Rename(p, rotated(p, 1)); err != nil {
		return fmt.Errorf("rotate audit log: %w", err)
	}
	old := a.f
	if err := a.open(); err != nil {
		return err
	}
	if err := old.Close(); err != nil {
		a.log.Warn("close the rotated audit log", "path", rotated(p, 1), "err", err)
	}
	return nil
}

// rotated names the i-th rotated file of path.
func rotated(path string, i int) string { return path + "." + strconv.Itoa(i) }

// Files lists the audit files of path that exist, oldest first:
// PATH.keep ... PATH.1, PATH. For tests and tools that read the whole
// trail.
func Files(path string, keep int) []string {
	var out []string
	for i := keep; i >= 1; i-- {
		if _, err := os.Lstat(rotated(path, i)); err == nil {
			out = append(out, rotated(path, i))
		}
	}
	if _, err := os.Lstat(path); err == nil {
		out = append(out, filepath.Clean(path))
	}
	return out
}

// Record is one line of the trail. Every field but time, event and
// outcome is left out when empty.
type Record struct {
	Time        string `json:"time"`
	Event       string `json:"event"`
	Outcome     string `json:"outcome"` // ok or refused
	Code        string `json:"code,omitempty"`
	CrossTenant bool   `json:"cross_tenant,omitempty"`
	Suppressed  uint64 `json:"suppressed,omitempty"` // refusal records left out before this one
	Tenant      string `json:"tenant,omitempty"`
	Subject     string `json:"subject,omitempty"`
	RemoteAddr  string `json:"remote_addr,omitempty"`
	Via         string `json:"via,omitempty"` // websocket or http
	Execution   string `json:"execution,omitempty"`
	Channel     uint32 `json:"channel,omitempty"`

	// start
	Command       string   `json:"command,omitempty"`
	Argv          []string `json:"argv,omitempty"`
	ArgvTruncated bool     `json:"argv_truncated,omitempty"`
	ArgvBytes     int      `json:"argv_bytes,omitempty"`
	TTY           *bool    `json:"tty,omitempty"`
	Cwd           string   `json:"cwd,omitempty"`
	Workspace     string   `json:"workspace,omitempty"`

	// attach, resize, signal
	ReadOnly *bool   `json:"read_only,omitempty"`
	After    *uint64 `json:"after,omitempty"` // the resume point
	Rows     int     `json:"rows,omitempty"`
	Cols     int     `json:"cols,omitempty"`
	Signal   string  `json:"signal,omitempty"`

	// input, detach, end
	InputBytes  *uint64 `json:"input_bytes,omitempty"`
	Reason      string  `json:"reason,omitempty"`
	Status      string  `json:"status,omitempty"`
	ExitCode    *int    `json:"exit_code,omitempty"`
	Duration    float64 `json:"duration,omitempty"` // seconds
	StdoutBytes *int64  `json:"stdout_bytes,omitempty"`
	StderrBytes *int64  `json:"stderr_bytes,omitempty"`

	// network (a change of policy), connect (a connection a
	// program asked for: its target, the policy's rule and, refused,
	// the Reason)
	Network string `json:"network,omitempty"`
	Host    string `json:"host,omitempty"`
	Address string `json:"address,omitempty"`
	Port    uint16 `json:"port,omitempty"`
	Rule    string `json:"rule,omitempty"`

	// forward (a stream to Port opened), forward-end (its end, with
	// Reason and its bytes to the port and from it)
	BytesUp   *uint64 `json:"bytes_up,omitempty"`
	BytesDown *uint64 `json:"bytes_down,omitempty"`

	// file-write, file-delete, file-mkdir, file-move (before the change:
	// the Path, and To for a move), file-written (after a write: its
	// Bytes, and the Reason none were kept)
	Path  string  `json:"path,omitempty"`
	To    string  `json:"to,omitempty"`
	Bytes *uint64 `json:"bytes,omitempty"`
}

// encode is the record as one line. encoding/json escapes the C0
// controls and wire.EscapeC1 the rest (DEL, U+0080-U+009F), so a command or
// ID cannot forge a line or a terminal sequence. A record over
// MaxRecordSize leaves out its argv.
func (r *Record) encode() ([]byte, error) {
	b, err := marshalEscaped(r)
	if err == nil && len(b)+1 > MaxRecordSize && len(r.Argv) > 0 {
		for _, s := range r.Argv {
			r.ArgvBytes += len(s)
		}
		r.Argv, r.ArgvTruncated = nil, true
		b, err = marshalEscaped(r)
	}
	if err != nil {
		return nil, err
	}
	if len(b)+1 > MaxRecordSize {
		return nil, fmt.Errorf("a %d-byte record is over the %d-byte bound", len(b)+1, MaxRecordSize)
	}
	return append(b, '\n'), nil
}

func marshalEscaped(r *Record) ([]byte, error) {
	b, err := json.Marshal(r)
	return wire.EscapeC1(b), err
}

// Outcomes of a record (Record.Outcome).
const (
	outcomeOK      = "ok"
	outcomeRefused = "refused"
)

// Record writes an action's record before the action takes effect: an
// error means refuse the action (ErrUnavailable). A nil Log (no trail)
// records nothing and refuses nothing.
func (a *Log) Record(r *Record) error {
	if a == nil {
		return nil
	}
	r.Outcome = outcomeOK
	return a.write(r)
}

// Refused writes a refusal's record, within the refusal rate; a refusal
// that cannot be written is counted as lost (the request is refused
// already). crossTenant, when not nil, is asked only for a record that
// is written: a flood of refusals costs no lookups.
func (a *Log) Refused(r *Record, code string, crossTenant func() bool) {
	if a == nil {
		return
	}
	if !a.refusals.Allow() {
		a.suppressed.Add(1)
		return
	}
	if crossTenant != nil {
		r.CrossTenant = crossTenant()
	}
	r.Outcome, r.Code, r.Suppressed = outcomeRefused, code, a.suppressed.Swap(0)
	if err := a.write(r); err != nil {
		a.lost.Add(1)
		a.suppressed.Add(r.Suppressed)
	}
}

// Happened writes the record of something that already happened and
// cannot be refused; one that cannot be written is counted as lost (and
// its streak logged).
func (a *Log) Happened(r *Record) {
	if a == nil {
		return
	}
	r.Outcome = outcomeOK
	if err := a.write(r); err != nil {
		a.lost.Add(1)
	}
}
