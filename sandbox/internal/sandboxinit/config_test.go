//go:build linux

package sandboxinit

import (
	"reflect"
	"strings"
	"testing"
)

func TestConfigRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{
		{Cwd: "/workspace"},
		{Cwd: "/w/x y", Terminal: true, Hold: true, Landlock: true,
			Env:     []string{"PATH=/usr/bin", "A=b=c", "EMPTY=", "NL=a\nb"},
			Rlimits: []Rlimit{{Resource: 0, Value: 5}, {Resource: 9, Value: 1 << 40}}},
	} {
		b, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
}

func TestConfigRefusesBadInput(t *testing.T) {
	t.Parallel()
	if _, err := (Config{Cwd: "/w", Env: []string{"A=\x00"}}).Encode(); err == nil {
		t.Error("a NUL in a value was encoded")
	}
	if _, err := (Config{Cwd: "/w", Env: []string{strings.Repeat("x", MaxConfig) + "="}}).Encode(); err == nil {
		t.Error("an oversized configuration was encoded")
	}
	for _, bad := range []string{
		"", "cwd", "cwd\x00/w", "cwd\x00/w\x00extra\x00", "cwd\x00/w\x00nope\x00x\x00",
		"cwd\x00/w\x00terminal\x00maybe\x00", "cwd\x00/w\x00rlimit\x00x=1\x00", "cwd\x00/w\x00rlimit\x001\x00",
		"cwd\x00/w\x00rlimit\x00-1=1\x00", "cwd\x00/w\x00env\x00NOEQUALS\x00", "terminal\x00true\x00",
	} {
		if c, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) = %+v, want an error", bad, c)
		}
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := Config{Cwd: "/w", Terminal: true, Env: []string{"A=1"}, Rlimits: []Rlimit{{1, 2}}}.Encode()
	f.Add(good)
	f.Add([]byte("cwd\x00/w\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		again, err := c.Encode()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", c, err)
		}
		if c2, err := Decode(again); err != nil || !reflect.DeepEqual(c2, c) {
			t.Fatalf("re-encoded %q decodes to %+v, %v, want %+v", again, c2, err, c)
		}
	})
}
