//go:build linux

package keeper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawConn speaks the protocol by hand, to send what a Client never would.
type rawConn struct {
	t *testing.T
	c *endpoint
}

func dialRaw(t *testing.T, dir string) *rawConn {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(dir, SocketName), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	uc.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{t: t, c: &endpoint{c: uc}}
}

func (r *rawConn) write(b []byte) {
	r.t.Helper()
	if _, err := r.c.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) read() message {
	r.t.Helper()
	m, fds, err := r.c.recv()
	closeFds(fds)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	return m
}

// hello says hello and reads the (empty) listing.
func (r *rawConn) hello() {
	r.t.Helper()
	r.write([]byte(`{"op":"hello","version":1,"min_version":1}`))
	if m := r.read(); m.Op != opWelcome {
		r.t.Fatalf("hello answered with %+v", m)
	}
	for m := r.read(); m.Op != opReady; m = r.read() {
	}
}

// startKeeper starts a keeper on a fresh directory and waits until it listens.
func startKeeper(t *testing.T) (string, *keeperProcs) {
	t.Helper()
	dir := stateDir(t)
	ks := newKeepers(t, dir, time.Minute, time.Second, 5*time.Second)
	ks.dial(t).Detach()
	return dir, ks
}

// TestMalformedMessages: each bad message gets a clear refusal and the
// connection goes on.
func TestMalformedMessages(t *testing.T) {
	t.Parallel()
	dir, _ := startKeeper(t)
	r := dialRaw(t, dir)
	r.hello()
	cases := []struct {
		name string
		msg  []byte
		code string
		text string
	}{
		{"not json", []byte(`{"op":`), "invalid", "decode message"},
		{"no op", []byte(`{"seq":3}`), "invalid", "without op"},
		{"unknown op", []byte(`{"op":"explode","seq":4}`), "invalid", `unknown operation "explode"`},
		{"second hello", []byte(`{"op":"hello","version":1,"seq":5}`), "invalid", `unknown operation "hello"`},
		{"too large", bytes.Repeat([]byte(" "), MaxMessage+1), "invalid", "exceeds"},
		{"bad key", []byte(`{"op":"forget","seq":6,"key":"../x"}`), "invalid", "does not match"},
		{"relative path", []byte(`{"op":"spawn","seq":7,"key":"k","path":"sh"}`), "invalid", "not absolute"},
		{"descriptors announced", []byte(`{"op":"spawn","seq":8,"key":"k","path":"/bin/true","files":3}`), "invalid", "carries 0 descriptors, announced 3"},
		{"too many descriptors", []byte(`{"op":"spawn","seq":9,"key":"k","path":"/bin/true","held":129}`), "invalid", "descriptors (at most 128)"},
		{"meta too large", []byte(`{"op":"annotate","seq":10,"key":"k","meta":"` + strings.Repeat("A", (MaxMeta+3)/3*4+4) + `"}`), "invalid", "meta of"},
		{"cgroup elsewhere", []byte(`{"op":"spawn","seq":11,"key":"k","path":"/bin/true","cgroups":["/etc"]}`), "invalid", "not below /sys/fs/cgroup"},
		{"remove outside", []byte(`{"op":"spawn","seq":12,"key":"k","path":"/bin/true","remove":["/tmp/x"]}`), "invalid", "not below"},
		{"remove the socket", []byte(`{"op":"spawn","seq":13,"key":"k","path":"/bin/true","remove":["` + filepath.Join(dir, SocketName) + `"]}`), "invalid", "not below"},
		{"too many paths", []byte(`{"op":"spawn","seq":16,"key":"k","path":"/bin/true","cgroups":[` + strings.Repeat(`"/sys/fs/cgroup/a",`, MaxPaths) + `"/sys/fs/cgroup/a"]}`), "invalid", "(at most 16)"},
		{"unknown child", []byte(`{"op":"forget","seq":14,"key":"k"}`), "unknown", "no such child"},
		{"too many paths resolved", []byte(`{"op":"spawn","seq":18,"key":"k","path":"/bin/true","resolves":[` + strings.Repeat(`"/usr",`, MaxResolves) + `"/usr"]}`), "invalid", "(at most 128)"},
		{"a relative path resolved", []byte(`{"op":"spawn","seq":19,"key":"k","path":"/bin/true","resolves":["usr"]}`), "invalid", "not absolute and clean"},
		{"an unclean path resolved", []byte(`{"op":"spawn","seq":20,"key":"k","path":"/bin/true","resolves":["/usr/../etc"]}`), "invalid", "not absolute and clean"},
		{"largest message", append([]byte(`{"op":"forget","seq":17,"key":"k"}`), bytes.Repeat([]byte(" "), MaxMessage-34)...), "unknown", "no such child"},
	}
	for _, tc := range cases {
		r.write(tc.msg)
		m := r.read()
		if m.Op != opReply || m.Code != tc.code || !strings.Contains(m.Error, tc.text) {
			t.Errorf("%s: got %+v, want code %q mentioning %q", tc.name, m, tc.code, tc.text)
		}
	}
}

// TestHandshakeLimit: connections that never say hello are bounded in
// number and time.
func TestHandshakeLimit(t *testing.T) {
	t.Parallel()
	dir, ks := startKeeper(t)
	c := ks.dial(t)
	shSpawn(t, c, "keep", `exec sleep 1000`) // keeps the keeper from its idle exit
	keeperPid := c.Pid()
	c.Detach()
	for range maxHandshakes {
		dialRaw(t, dir)
	}
	waitFor(time.Second, func() bool { return false }) // let the keeper accept them
	extra := dialRaw(t, dir)
	start := time.Now()
	if _, _, err := extra.c.recv(); !errors.Is(err, errClosed) {
		t.Fatalf("connection beyond %d handshakes: %v, want it closed", maxHandshakes, err)
	}
	if waited := time.Since(start); waited > HelloTimeout/2 {
		t.Logf("closed after %v: refused late, by the hello timeout", waited)
	}
	// A client gets through once the silent ones timed out.
	ctx, cancel := context.WithTimeout(t.Context(), 3*HelloTimeout)
	defer cancel()
	c, err := Dial(ctx, dir, func() error { return nil })
	if err != nil {
		t.Fatalf("dial after the silent connections: %v", err)
	}
	defer c.Detach()
	if c.Pid() != keeperPid {
		t.Errorf("keeper %d, want the same %d", c.Pid(), keeperPid)
	}
	stopChildren(t, c, c.Children())
}

// TestHello: a newer gateway (higher version, unknown fields) is served
// at the keeper's version; a gateway needing a newer one is refused; a
// connection must start with hello.
func TestHello(t *testing.T) {
	t.Parallel()
	dir, _ := startKeeper(t)
	serves := fmt.Sprintf("this keeper %d", Version)
	cases := []struct {
		name  string
		hello string
		op    string
		code  string
		text  string
	}{
		{"newer gateway", `{"op":"hello","version":7,"min_version":1,"future":{"x":1}}`, opWelcome, "", ""},
		{"too new", `{"op":"hello","version":9,"min_version":8}`, opRefuse, "version", "speaks 8..9, " + serves},
		{"too old", `{"op":"hello","version":0}`, opRefuse, "version", serves},
		{"no hello", `{"op":"forget","key":"x"}`, opRefuse, "invalid", `first message is "forget"`},
		{"garbage", `hello`, opRefuse, "invalid", "decode message"},
	}
	for _, tc := range cases {
		r := dialRaw(t, dir)
		r.write([]byte(tc.hello))
		m := r.read()
		if m.Op != tc.op || m.Code != tc.code || !strings.Contains(m.Error, tc.text) {
			t.Errorf("%s: got %+v, want %s with code %q mentioning %q", tc.name, m, tc.op, tc.code, tc.text)
		}
		if m.Op == opWelcome && m.Version != Version {
			t.Errorf("%s: served version %d, want %d", tc.name, m.Version, Version)
		}
		r.c.c.Close()
		if m.Op == opWelcome {
			waitFor(5*time.Second, func() bool { return dialAttach(dir) == nil }) // let it detach
		}
	}
	// The client maps a version refusal to ErrVersion.
	if err := (&message{Op: opRefuse, Code: "version", Error: "keeper: unsupported protocol version: x"}).refusal(); !errors.Is(err, ErrVersion) {
		t.Errorf("refusal: %v, want ErrVersion", err)
	}
}

// dialAttach attaches once and detaches.
func dialAttach(dir string) error {
	c, err := Dial(context.Background(), dir, nil)
	if err == nil {
		c.Detach()
	}
	return err
}

// TestSpawnRefusals: requests a keeper must refuse, through the Client.
func TestSpawnRefusals(t *testing.T) {
	t.Parallel()
	dir, ks := startKeeper(t)
	c := ks.dial(t)
	defer c.Detach()
	shSpawn(t, c, "dup", `exit 0`)
	<-c.Exit("dup")
	cases := []struct {
		name string
		req  SpawnRequest
		want error
		text string
	}{
		{"key in use", SpawnRequest{Key: "dup", Path: "/bin/true"}, ErrExists, "dup"},
		{"bad key", SpawnRequest{Key: "a/b", Path: "/bin/true"}, ErrInvalid, "does not match"},
		{"empty key", SpawnRequest{Path: "/bin/true"}, ErrInvalid, "does not match"},
		{"long key", SpawnRequest{Key: strings.Repeat("k", 129), Path: "/bin/true"}, ErrInvalid, "does not match"},
		{"meta", SpawnRequest{Key: "m", Path: "/bin/true", Meta: make([]byte, MaxMeta+1)}, ErrInvalid, "meta of 65537 bytes"},
		{"remove outside", SpawnRequest{Key: "r", Path: "/bin/true", Remove: []string{"/var/tmp"}}, ErrInvalid, "not below " + dir},
		{"remove the dir", SpawnRequest{Key: "r", Path: "/bin/true", Remove: []string{dir}}, ErrInvalid, "not below"},
		{"remove unclean", SpawnRequest{Key: "r", Path: "/bin/true", Remove: []string{dir + "/a/../../x"}}, ErrInvalid, "not below"},
		{"env", SpawnRequest{Key: "e", Path: "/bin/true", Env: []string{"NOEQUALS"}}, ErrInvalid, "no '='"},
		{"missing program", SpawnRequest{Key: "p", Path: "/nonexistent/prog"}, nil, "no such file"},
		{"nil file", SpawnRequest{Key: "n", Path: "/bin/true", Files: []*os.File{nil}}, ErrInvalid, "nil"},
		{"into another cgroup", SpawnRequest{Key: "i", Path: "/bin/true", Cgroups: []string{"/sys/fs/cgroup/a"}, Into: "/sys/fs/cgroup/b"}, ErrInvalid, "not one of the spawn's cgroups"},
		{"enter another cgroup", SpawnRequest{Key: "i", Path: "/bin/true", Cgroups: []string{"/sys/fs/cgroup/a"}, Enter: []string{"/sys/fs/cgroup/b"}}, ErrInvalid, "not one of the spawn's cgroups"},
		{"enter into", SpawnRequest{Key: "i", Path: "/bin/true", Cgroups: []string{"/sys/fs/cgroup/a"}, Into: "/sys/fs/cgroup/a", Enter: []string{"/sys/fs/cgroup/a"}}, ErrInvalid, "but Into"},
	}
	for _, tc := range cases {
		_, err := c.Spawn(t.Context(), tc.req)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, want %v mentioning %q", tc.name, err, tc.want, tc.text)
		}
	}
	// The largest meta goes through and comes back on adoption.
	big := bytes.Repeat([]byte{0xff}, MaxMeta)
	args := append([]string{"true"}, slices.Repeat([]string{strings.Repeat("a", 40)}, 1000)...)
	if _, err := c.Spawn(t.Context(), SpawnRequest{Key: "big", Path: "/bin/true", Args: args, Meta: big}); err != nil {
		t.Errorf("spawn with %d bytes of meta and %d arguments: %v", MaxMeta, len(args), err)
	}
	// A failed fork leaves the key free.
	if _, err := c.Spawn(t.Context(), SpawnRequest{Key: "p", Path: "/bin/true"}); err != nil {
		t.Errorf("spawn after a failed fork: %v", err)
	}
	// Annotate replaces the meta the next gateway gets.
	if err := c.Annotate("dup", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if err := c.Annotate("none", nil); !errors.Is(err, ErrUnknown) {
		t.Errorf("annotate unknown: %v", err)
	}
	c.Detach()
	c = ks.dial(t)
	defer c.Detach()
	for _, ch := range c.Children() {
		if ch.Key == "dup" && string(ch.Meta) != "v2" {
			t.Errorf("meta %q after Annotate, want v2", ch.Meta)
		}
		if ch.Key == "big" && !bytes.Equal(ch.Meta, big) {
			t.Errorf("meta of %d bytes came back as %d", len(big), len(ch.Meta))
		}
	}
}

// TestEnvironmentAndCredentials: the child gets exactly Env (none when
// empty), Dir, and Cred.
func TestEnvironmentAndCredentials(t *testing.T) {
	t.Parallel()
	dir, ks := startKeeper(t)
	c := ks.dial(t)
	defer c.Detach()
	out := filepath.Join(filepath.Dir(dir), "out")
	cases := []struct {
		name string
		req  func(*SpawnRequest)
		want string
	}{
		{"empty env", func(r *SpawnRequest) {}, "env=[] dir=/ id=" + itoa(os.Geteuid())},
		{"given env", func(r *SpawnRequest) { r.Env = []string{"A=1", "B=two"} }, "env=[A=1 B=two] dir=/ id=" + itoa(os.Geteuid())},
		{"dir", func(r *SpawnRequest) { r.Dir = "/tmp" }, "env=[] dir=/tmp id=" + itoa(os.Geteuid())},
	}
	if os.Geteuid() == 0 {
		cases = append(cases, struct {
			name string
			req  func(*SpawnRequest)
			want string
		}{"cred", func(r *SpawnRequest) { r.Cred = credNobody() }, "env=[] dir=/ id=65534"})
	}
	for i, tc := range cases {
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(out, 0o666)
		key := "env" + itoa(i)
		null := devNull(t)
		req := SpawnRequest{Key: key, Path: "/bin/sh", Dir: "/",
			Args:  []string{"sh", "-c", `echo "env=[$(env | grep -v '^PWD=' | sort | tr '\n' ' ' | sed 's/ $//')] dir=$(pwd) id=$(id -u)"`},
			Files: []*os.File{null, f, f}}
		tc.req(&req)
		if _, err := c.Spawn(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		f.Close()
		<-c.Exit(key)
		got, _ := os.ReadFile(out)
		if strings.TrimSpace(string(got)) != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, strings.TrimSpace(string(got)), tc.want)
		}
	}
}

// FuzzDecode: the decoder never panics, and what it accepts survives a
// round trip unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"op":"hello","version":1,"min_version":1}`,
		`{"op":"spawn","seq":1,"key":"k","path":"/bin/sh","args":["sh","-c","x"],"env":["A=1"],"files":3,"held":1,"cgroups":["/sys/fs/cgroup/a"],"into":"/sys/fs/cgroup/a","remove":["/s/x"],"meta":"AAEC","cred":{"uid":1,"gid":2,"groups":[3]}}`,
		`{"op":"exit","key":"k","status":256}`,
		`{"op":"spawn","key":"k","path":"/bin/sh","cgroups":["/sys/fs/cgroup/a"],"into":"/sys/fs/cgroup/b"}`,
		`{"op":"reply","seq":2,"pid":7,"placed":true}`,
		`{"op":"spawn","key":"k","path":"/bin/sh","cgroups":["/sys/fs/cgroup/u/a","/sys/fs/cgroup/memory/a"],"into":"/sys/fs/cgroup/u/a","enter":["/sys/fs/cgroup/memory/a"]}`,
		`{"op":"spawn","key":"k","path":"/bin/sh","cgroups":["/sys/fs/cgroup/a"],"enter":["/sys/fs/cgroup/b"]}`,
		`{"op":"reply","seq":2,"pid":7,"placed":true,"entered":["/sys/fs/cgroup/memory/a"]}`,
		`{"op":"child","key":"k","pid":5,"exited":true,"held":2}`,
		`{"op":"reply","seq":9,"code":"busy","error":"keeper: another gateway is attached: pid 1"}`,
		`{"op":"forget","key":"../.."}`, `{}`, `[]`, `null`, `{"op":"spawn","files":-1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		enc, err := encode(m)
		if err != nil {
			return // JSON escaping may grow a message past the limit
		}
		m2, err := decode(enc)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", enc, err)
		}
		enc2, _ := json.Marshal(m2)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip changed %s into %s", enc, enc2)
		}
	})
}

// TestSentFilesStayNonBlocking: the descriptors a spawn hands over keep
// the caller's *os.File as it was: a non-blocking one stays non-blocking
// and in the runtime poller (os.File.Fd would switch it, and the shared
// open file description, to blocking for good).
func TestSentFilesStayNonBlocking(t *testing.T) {
	t.Parallel()
	_, ks := startKeeper(t)
	c := ks.dial(t)
	defer c.Detach()
	r, w, err := os.Pipe() // both ends non-blocking, in the poller
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	null := devNull(t)
	if _, err := c.Spawn(t.Context(), SpawnRequest{Key: "nb", Path: "/bin/true",
		Files: []*os.File{null, null, null}, Held: []*os.File{r, w}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{r, w} {
		if !isNonblock(t, f) {
			t.Errorf("%s is blocking after the spawn", f.Name())
		}
		if err := f.SetDeadline(time.Now().Add(time.Hour)); err != nil {
			t.Errorf("%s left the poller: %v", f.Name(), err)
		}
	}
	<-c.Exit("nb")
	if err := c.Forget("nb"); err != nil {
		t.Error(err)
	}
}

// isNonblock reads O_NONBLOCK of f's open file description without Fd.
func isNonblock(t *testing.T, f *os.File) bool {
	t.Helper()
	raw, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	var ferr error
	raw.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if ferr != nil {
		t.Fatal(ferr)
	}
	return flags&unix.O_NONBLOCK != 0
}

// TestRecvReusesItsBuffer: receiving a message does not allocate a
// MaxMessage buffer each time, which was most of a keeper's resident
// memory per child. Not parallel: it counts the process's allocations.
func TestRecvReusesItsBuffer(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ends := make([]*endpoint, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "end")
		nc, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		ends[i] = &endpoint{c: nc.(*net.UnixConn)}
	}
	const n = 100
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		if err := ends[0].send(message{Op: opExit, Key: "k", Status: i}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ends[1].recv(); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > MaxMessage/4 {
		t.Errorf("%d bytes allocated per message received, want well below MaxMessage (%d)", per, MaxMessage)
	}
}
