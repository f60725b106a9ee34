//go:build linux

package keeper

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Limits of the protocol. Every message is one SOCK_SEQPACKET packet.
// They hold the largest spawn a gateway may need with room to spare: the
// sandbox's largest valid policy (4096 command arguments in 256 KiB, 64
// binds) becomes bwrap with 5 arguments of its own, 77 descriptors for
// it and 4 to hold, and at most 64 KiB of notes (its own check keeps
// these figures below the limits).
const (
	// Version is the protocol this package speaks, the one there is. A
	// hello states it (and the oldest the gateway still speaks), so that
	// a later protocol can be told apart.
	Version = 1
	// MaxMessage bounds a message's bytes (its JSON encoding).
	MaxMessage = 192 << 10
	// MaxMeta bounds SpawnRequest.Meta and Annotate's meta.
	MaxMeta = 64 << 10
	// MaxFiles bounds the descriptors riding on one message (Files plus
	// Held, plus the arguments' own); the kernel takes up to 253.
	MaxFiles = 128
	// MaxArgs bounds the number of Args plus Env entries of a spawn.
	MaxArgs = 8192
	// MaxArgBytes bounds the bytes of Args plus Env, each counted with a
	// terminating NUL, as the kernel counts them for exec.
	MaxArgBytes = 1 << 20
	// MaxPaths bounds the Cgroups plus Remove paths of a spawn.
	MaxPaths = 16
	// MaxResolves bounds SpawnRequest.Resolves: the sandbox's binds
	// (at most 64) and its fixed paths, with room to spare.
	MaxResolves = 128
	// MaxChildren bounds the children one keeper holds.
	MaxChildren = 4096
)

// Operations. The gateway sends hello (first), spawn, annotate and
// forget; the keeper answers hello with welcome (or refuse), then one
// child message per child it holds and ready, each request with a reply,
// and sends exit whenever a child was reaped.
const (
	opHello    = "hello"
	opSpawn    = "spawn"
	opAnnotate = "annotate"
	opForget   = "forget"
	opWelcome  = "welcome"
	opRefuse   = "refuse"
	opChild    = "child"
	opReady    = "ready"
	opReply    = "reply"
	opExit     = "exit"
)

// Error codes carried by refuse and reply messages; each maps to a sentinel.
var codes = map[string]error{
	"busy":    ErrBusy,
	"version": ErrVersion,
	"invalid": ErrInvalid,
	"exists":  ErrExists,
	"unknown": ErrUnknown,
	"running": ErrStillRunning,
	"full":    ErrFull,
}

// message is every message of the protocol; each operation uses a few of
// the fields. Unknown fields are ignored, so newer peers may add some.
type message struct {
	Op         string      `json:"op"`
	Seq        uint64      `json:"seq,omitempty"`
	Version    int         `json:"version,omitempty"`
	MinVersion int         `json:"min_version,omitempty"`
	Pid        int         `json:"pid,omitempty"`
	Key        string      `json:"key,omitempty"`
	Path       string      `json:"path,omitempty"`
	Args       []string    `json:"-"` // a spawn's, in its arguments file
	Env        []string    `json:"-"` // a spawn's, in its arguments file
	Dir        string      `json:"dir,omitempty"`
	Cred       *credential `json:"cred,omitempty"`
	Files      int         `json:"files,omitempty"`     // descriptors that become the child's 0..n-1
	Held       int         `json:"held,omitempty"`      // descriptors after those, kept by the keeper
	NetNS      bool        `json:"netns,omitempty"`     // a spawn's descriptor after those is the network namespace to fork the child in
	ArgsFile   bool        `json:"args_file,omitempty"` // a spawn's last descriptor holds Args then Env (without: none of either)
	Argc       int         `json:"argc,omitempty"`      // with ArgsFile: how many of its entries are Args
	Cgroups    []string    `json:"cgroups,omitempty"`
	Into       string      `json:"into,omitempty"`    // one of Cgroups, to fork the child into
	Placed     bool        `json:"placed,omitempty"`  // a spawn's reply: the child was forked into Into
	Enter      []string    `json:"enter,omitempty"`   // of Cgroups, v1 directories the child is to be born in
	Entered    []string    `json:"entered,omitempty"` // a spawn's reply: those of Enter it was born in
	Remove     []string    `json:"remove,omitempty"`
	Resolves   []string    `json:"resolves,omitempty"`   // see SpawnRequest.Resolves
	Lean       bool        `json:"lean,omitempty"`       // a spawn's reply: forked from a lean mount namespace
	Supervised bool        `json:"supervised,omitempty"` // see SpawnRequest.Supervised
	Meta       []byte      `json:"meta,omitempty"`
	Exited     bool        `json:"exited,omitempty"`
	Status     int         `json:"status,omitempty"` // unix.WaitStatus
	Count      int         `json:"count,omitempty"`  // children that follow a welcome
	Code       string      `json:"code,omitempty"`
	Error      string      `json:"error,omitempty"`
}

type credential struct {
	Uid         uint32   `json:"uid"`
	Gid         uint32   `json:"gid"`
	Groups      []uint32 `json:"groups,omitempty"`
	NoSetGroups bool     `json:"no_setgroups,omitempty"`
}

var keyPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`) })

// decode parses and checks one packet; descriptors are checked by the
// receiver against Files and Held.
func decode(b []byte) (message, error) {
	var m message
	if len(b) > MaxMessage {
		return m, fmt.Errorf("%w: message of %d bytes exceeds %d", ErrInvalid, len(b), MaxMessage)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: decode message: %w", ErrInvalid, err)
	}
	if err := m.check(); err != nil {
		return m, err
	}
	return m, nil
}

// encode marshals m, refusing what the peer would refuse as too large.
func encode(m message) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("keeper: encode %s: %w", m.Op, err)
	}
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("%w: %s message of %d bytes exceeds %d", ErrInvalid, m.Op, len(b), MaxMessage)
	}
	return b, nil
}

// check validates the fields an operation relies on. Unknown operations
// pass: the receiver decides what to do with them.
func (m *message) check() error {
	if m.Op == "" {
		return fmt.Errorf("%w: message without op", ErrInvalid)
	}
	if len(m.Meta) > MaxMeta {
		return fmt.Errorf("%w: meta of %d bytes exceeds %d", ErrInvalid, len(m.Meta), MaxMeta)
	}
	if m.Files < 0 || m.Held < 0 || m.fds() > MaxFiles {
		return fmt.Errorf("%w: %d+%d descriptors (at most %d)", ErrInvalid, m.Files, m.Held, MaxFiles)
	}
	switch m.Op {
	case opSpawn:
		return m.checkSpawn()
	case opAnnotate, opForget, opChild, opExit:
		return checkKey(m.Key)
	}
	return nil
}

// fds is the number of descriptors m announces: Files, Held, the network
// namespace, then the arguments file.
func (m *message) fds() int {
	n := m.Files + m.Held
	if m.NetNS {
		n++
	}
	if m.ArgsFile {
		n++
	}
	return n
}

// announced says which descriptors m announces, for an error.
func (m *message) announced() string {
	n := fmt.Sprint(m.Files + m.Held)
	if m.NetNS {
		n += " and a network namespace"
	}
	if m.ArgsFile {
		n += " and its arguments file"
	}
	return n
}

func (m *message) checkSpawn() error {
	if err := checkKey(m.Key); err != nil {
		return err
	}
	if !filepath.IsAbs(m.Path) || strings.IndexByte(m.Path, 0) >= 0 {
		return fmt.Errorf("%w: program path %q is not absolute", ErrInvalid, m.Path)
	}
	if err := checkArgs(m.Args, m.Env); err != nil {
		return err
	}
	if len(m.Cgroups)+len(m.Remove) > MaxPaths {
		return fmt.Errorf("%w: %d cgroups and paths to remove (at most %d)", ErrInvalid, len(m.Cgroups)+len(m.Remove), MaxPaths)
	}
	for _, c := range m.Cgroups {
		if !below(cgroupRoot, c) {
			return fmt.Errorf("%w: cgroup %q is not below %s", ErrInvalid, c, cgroupRoot)
		}
	}
	if len(m.Resolves) > MaxResolves {
		return fmt.Errorf("%w: %d paths the child resolves (at most %d)", ErrInvalid, len(m.Resolves), MaxResolves)
	}
	for _, p := range m.Resolves {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("%w: path the child resolves %q is not absolute and clean", ErrInvalid, p)
		}
	}
	if m.Into != "" && !slices.Contains(m.Cgroups, m.Into) {
		return fmt.Errorf("%w: cgroup to fork into %q is not one of the spawn's cgroups", ErrInvalid, m.Into)
	}
	for _, c := range m.Enter {
		if !slices.Contains(m.Cgroups, c) || c == m.Into {
			return fmt.Errorf("%w: cgroup to enter %q is not one of the spawn's cgroups but Into", ErrInvalid, c)
		}
	}
	return nil
}

// checkArgs bounds a spawn's arguments and environment.
func checkArgs(args, env []string) error {
	if len(args)+len(env) > MaxArgs {
		return fmt.Errorf("%w: %d arguments and variables (at most %d)", ErrInvalid, len(args)+len(env), MaxArgs)
	}
	size := 0
	for _, a := range args {
		size += len(a) + 1
	}
	for _, e := range env {
		if !strings.Contains(e, "=") {
			return fmt.Errorf("%w: environment entry %q has no '='", ErrInvalid, e)
		}
		size += len(e) + 1
	}
	if size > MaxArgBytes {
		return fmt.Errorf("%w: arguments and variables take %d bytes (at most %d)", ErrInvalid, size, MaxArgBytes)
	}
	return nil
}

func checkKey(key string) error {
	if !keyPattern().MatchString(key) {
		return fmt.Errorf("%w: key %q does not match [A-Za-z0-9._-]{1,128}", ErrInvalid, key)
	}
	return nil
}

// below reports whether path is clean, absolute and strictly below dir.
func below(dir, path string) bool {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return false
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// refusal turns a refuse or failed reply into an error wrapping its sentinel.
func (m *message) refusal() error {
	if m.Code == "" && m.Error == "" {
		return nil
	}
	sentinel, ok := codes[m.Code]
	if !ok {
		return fmt.Errorf("keeper: %s", m.Error)
	}
	if m.Error == "" || m.Error == sentinel.Error() {
		return sentinel
	}
	return fmt.Errorf("%w: %s", sentinel, strings.TrimPrefix(m.Error, sentinel.Error()+": "))
}

// codeOf returns the wire code of err's sentinel ("" when none).
func codeOf(err error) string {
	for code, sentinel := range codes {
		if errors.Is(err, sentinel) {
			return code
		}
	}
	return ""
}

// endpoint is one end of the socket: whole messages with descriptors.
type endpoint struct {
	c  *net.UnixConn
	mu sync.Mutex // serialises writes
	// buf and oob are recv's, reused: each connection has one reader,
	// and a fresh MaxMessage buffer per message would be most of what
	// the keeper allocates for a spawn.
	buf, oob []byte
}

// send writes one message with fds as SCM_RIGHTS.
func (c *endpoint) send(m message, fds ...int) error {
	b, err := encode(m)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sendLocked(b, fds)
}

func (c *endpoint) sendLocked(b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("keeper: send: %w", err)
	}
	return nil
}

// errClosed is returned by recv at end of file.
var errClosed = errors.New("keeper: connection closed")

// recv reads one message and the descriptors riding on it. A malformed
// message returns an error wrapping ErrInvalid, its descriptors closed;
// errClosed or another error means the connection is unusable.
func (c *endpoint) recv() (message, []int, error) {
	if c.buf == nil {
		c.buf, c.oob = make([]byte, MaxMessage+1), make([]byte, unix.CmsgSpace(MaxFiles*4))
	}
	b, oob := c.buf, c.oob
	n, oobn, flags, _, err := c.c.ReadMsgUnix(b, oob)
	if errors.Is(err, io.EOF) {
		return message{}, nil, errClosed
	}
	if err != nil {
		return message{}, nil, fmt.Errorf("keeper: receive: %w", err)
	}
	files, ferr := parseRights(oob[:oobn])
	if n == 0 && oobn == 0 {
		return message{}, nil, errClosed
	}
	var m message
	if flags&unix.MSG_TRUNC != 0 || n > MaxMessage {
		err = fmt.Errorf("%w: message exceeds %d bytes", ErrInvalid, MaxMessage)
	} else {
		m, err = decode(b[:n]) // even with bad descriptors: the refusal needs m.Seq
	}
	switch {
	case ferr != nil:
		err = ferr
	case flags&unix.MSG_CTRUNC != 0:
		err = fmt.Errorf("%w: more than %d descriptors", ErrInvalid, MaxFiles)
	}
	if err == nil && len(files) != m.fds() {
		err = fmt.Errorf("%w: %s carries %d descriptors, announced %s", ErrInvalid, m.Op, len(files), m.announced())
	}
	if err != nil {
		closeFds(files)
		return m, nil, err
	}
	return m, files, nil
}

// parseRights returns the descriptors of a control message's SCM_RIGHTS
// (the socket receives them close-on-exec). They stay plain numbers: an
// *os.File of a non-blocking descriptor would join the runtime poller, and
// the keeper would wake up for every byte its children write.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	scms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control message: %w", ErrInvalid, err)
	}
	var all []int
	for _, s := range scms {
		fds, err := unix.ParseUnixRights(&s)
		if err == nil {
			all = append(all, fds...)
		}
	}
	return all, nil
}

// closeFds closes descriptors the keeper holds as numbers.
func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// rawFds returns the descriptors of files without File.Fd, which would
// switch a non-blocking descriptor (and so everyone's copy) to blocking.
// The caller keeps files alive until the descriptors were used.
func rawFds(files []*os.File) ([]int, error) {
	fds := make([]int, len(files))
	for i, f := range files {
		if f == nil {
			return nil, fmt.Errorf("%w: descriptor %d is nil", ErrInvalid, i)
		}
		raw, err := f.SyscallConn()
		if err != nil {
			return nil, fmt.Errorf("keeper: descriptor %d: %w", i, err)
		}
		if err := raw.Control(func(fd uintptr) { fds[i] = int(fd) }); err != nil {
			return nil, fmt.Errorf("keeper: descriptor %d: %w", i, err)
		}
	}
	return fds, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}
