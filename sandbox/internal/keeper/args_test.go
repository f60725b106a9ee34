//go:build linux

package keeper

import (
	"crypto/md5"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// largestArgs are MaxArgs-len(env) arguments after sh -c script, with
// the environment in exactly MaxArgBytes, full of bytes JSON would
// escape or replace. The script prints a digest of "$@" and of its
// variables named A*.
func largestArgs() (args, env []string, want string) {
	script := `printf '%s\0' "$@" | md5sum; env | grep '^A' | sort | md5sum`
	env = []string{"A0=\xff\x01<>&\"", "A1=\u2028\\"}
	args = []string{"sh", "-c", script, "sh"}
	used := 0
	for _, a := range append(append([]string{}, args...), env...) {
		used += len(a) + 1
	}
	n := MaxArgs - len(args) - len(env)
	size := (MaxArgBytes - used) / n // with its NUL
	var params []string
	for i := range n {
		p := fmt.Sprintf("%05d\xff\xc3\x01<>&\"\\", i)
		p += strings.Repeat("x", size-1-len(p))
		if i == n-1 {
			p += strings.Repeat("y", MaxArgBytes-used-n*size)
		}
		params = append(params, p)
	}
	sum := md5.Sum([]byte(strings.Join(params, "\x00") + "\x00"))
	envSum := md5.Sum([]byte(strings.Join(env, "\n") + "\n"))
	return append(args, params...), env, fmt.Sprintf("%x  -\n%x  -\n", sum, envSum)
}

// TestArgumentsExact: a spawn at MaxArgs and MaxArgBytes reaches the
// child byte for byte, bytes that are not UTF-8 included; one more
// argument, byte or descriptor is refused.
func TestArgumentsExact(t *testing.T) {
	t.Parallel()
	dir, ks := startKeeper(t)
	c := ks.dial(t)
	defer c.Detach()
	args, env, want := largestArgs()
	size := 0
	for _, a := range append(append([]string{}, args...), env...) {
		size += len(a) + 1
	}
	if len(args)+len(env) != MaxArgs || size != MaxArgBytes {
		t.Fatalf("the test's spawn has %d entries in %d bytes, want %d in %d", len(args)+len(env), size, MaxArgs, MaxArgBytes)
	}
	out := filepath.Join(filepath.Dir(dir), "digest")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	null := devNull(t)
	files := append([]*os.File{null, f, f}, nulls(null, MaxFiles-4)...) // the arguments take the last one
	if _, err := c.Spawn(t.Context(), SpawnRequest{Key: "largest", Path: "/bin/sh", Args: args, Env: env, Files: files}); err != nil {
		t.Fatalf("spawn at the limits: %v", err)
	}
	f.Close()
	<-c.Exit("largest")
	if got, _ := os.ReadFile(out); string(got) != want {
		t.Errorf("the child saw other arguments or variables: digests %q, want %q", got, want)
	}
	over := []struct {
		name string
		req  SpawnRequest
		text string
	}{
		{"arguments", SpawnRequest{Args: make([]string, MaxArgs+1)}, "8193 arguments and variables"},
		{"bytes", SpawnRequest{Args: []string{strings.Repeat("a", MaxArgBytes)}}, "take 1048577 bytes"},
		{"descriptors", SpawnRequest{Files: nulls(null, MaxFiles-1), Held: []*os.File{null}}, "descriptors (at most 128)"},
		{"NUL", SpawnRequest{Args: []string{"sh", "a\x00b"}}, "NUL"},
	}
	for _, tc := range over {
		tc.req.Key, tc.req.Path = "over", "/bin/true"
		if _, err := c.Spawn(t.Context(), tc.req); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s over the limit: %v, want ErrInvalid mentioning %q", tc.name, err, tc.text)
		}
	}
}

// TestReadArgsRefusals: an arguments file the keeper cannot trust.
func TestReadArgsRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		data string
		argc int
		text string
	}{
		{"no final NUL", "a\x00b", 1, "does not end with a NUL"},
		{"argc", "a\x00", 2, "2 arguments announced"},
		{"negative argc", "a\x00", -1, "-1 arguments announced"},
		{"too many", strings.Repeat("\x00", MaxArgs+1), 0, "more than 8192"},
		{"too large", strings.Repeat("a", MaxArgBytes) + "\x00", 1, "exceeds"},
	}
	for _, tc := range cases {
		fd, err := unix.MemfdCreate("t", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		unix.Write(fd, []byte(tc.data))
		_, _, err = readArgs(fd, tc.argc)
		unix.Close(fd)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, want ErrInvalid mentioning %q", tc.name, err, tc.text)
		}
	}
	fd, _ := unix.MemfdCreate("t", unix.MFD_CLOEXEC)
	defer unix.Close(fd)
	unix.Write(fd, []byte("a\x00\xff\x00B=1\x00\x00"))
	args, env, err := readArgs(fd, 2)
	if err != nil || strings.Join(args, "|") != "a|\xff" || strings.Join(env, "|") != "B=1|" {
		t.Errorf("readArgs: %q %q %v", args, env, err)
	}
}

func nulls(null *os.File, n int) []*os.File {
	files := make([]*os.File, n)
	for i := range files {
		files[i] = null
	}
	return files
}

// TestTruncatedDescriptorsAnswered: a request with more descriptors than
// the keeper takes is refused in a reply to that request (its seq), so
// the request does not wait forever.
func TestTruncatedDescriptorsAnswered(t *testing.T) {
	t.Parallel()
	dir, _ := startKeeper(t)
	r := dialRaw(t, dir)
	r.hello()
	null := devNull(t)
	fds := make([]int, MaxFiles+2)
	for i := range fds {
		fds[i] = int(null.Fd())
	}
	b, _ := encode(message{Op: opSpawn, Seq: 7, Key: "k", Path: "/bin/true", Files: len(fds)})
	if err := r.c.sendLocked(b, fds); err != nil {
		t.Fatal(err)
	}
	if m := r.read(); m.Op != opReply || m.Seq != 7 || m.Code != "invalid" || !strings.Contains(m.Error, "descriptors") {
		t.Errorf("reply %+v, want seq 7 refused as invalid", m)
	}
}
