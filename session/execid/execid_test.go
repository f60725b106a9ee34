package execid

import (
	"net/url"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	long63 := strings.Repeat("a", 63)
	key128 := "k" + strings.Repeat("x", 127)
	for _, tc := range []struct {
		id        string
		owner     Owner
		key       string
		canonical bool
		bad       bool
	}{
		{id: "build-42", key: "build-42"},
		{id: "x-abcdefghijklmnop", key: "x-abcdefghijklmnop"},
		{id: "a.b:c_d-e", key: "a.b:c_d-e"},
		{id: key128, key: key128},
		{id: "termgate-1.q7bazk~build-42", owner: Owner{"termgate-1", "q7bazk"}, key: "build-42", canonical: true},
		{id: "n0.aaaaaa~k", owner: Owner{"n0", "aaaaaa"}, key: "k", canonical: true},
		{id: "0.234567~a.b.c", owner: Owner{"0", "234567"}, key: "a.b.c", canonical: true},
		{id: long63 + ".abcdef~" + key128, owner: Owner{long63, "abcdef"}, key: key128, canonical: true},
		{id: "", bad: true},
		{id: "-x", bad: true},
		{id: "k" + strings.Repeat("x", 128), bad: true}, // key of 129
		{id: "a b", bad: true},                          // space
		{id: "x~y", bad: true},                          // no epoch
		{id: "n.abcdef~", bad: true},                    // empty key
		{id: "n.abcdef~-k", bad: true},                  // key starts with -
		{id: "n.abcdef~k~l", bad: true},                 // two ~
		{id: "N.abcdef~k", bad: true},                   // upper-case node
		{id: "-n.abcdef~k", bad: true},                  // node starts with -
		{id: "n-.abcdef~k", bad: true},                  // node ends with -
		{id: "n.abcde~k", bad: true},                    // epoch of 5
		{id: "n.abcdefg~k", bad: true},                  // epoch of 7
		{id: "n.abcde1~k", bad: true},                   // 1 is not in the alphabet
		{id: "n.ABCDEF~k", bad: true},                   // upper-case epoch
		{id: "a.b.abcdef~k", bad: true},                 // dot in node
		{id: ".abcdef~k", bad: true},                    // empty node
		{id: long63 + "a.abcdef~k", bad: true},          // node of 64
		{id: "n.abcdef~" + key128 + "x", bad: true},     // key of 129
		{id: "n.abcdef~k/../x", bad: true},              // slash
		{id: "n.abcdef~k\n", bad: true},                 // newline
		{id: "n.abcdef\u00a0~k", bad: true},             // non-ASCII
		{id: "n.abcdef~k%2F", bad: true},                // percent
	} {
		o, key, ok := Parse(tc.id)
		canonical := o != Owner{}
		if tc.bad {
			if ok {
				t.Errorf("Parse(%q) = %v, %q, true; want false", tc.id, o, key)
			}
			if Valid(tc.id) {
				t.Errorf("Valid accepts %q, Parse does not", tc.id)
			}
			continue
		}
		if !ok || o != tc.owner || key != tc.key || canonical != tc.canonical {
			t.Errorf("Parse(%q) = %+v, %q, %v; want %+v, %q", tc.id, o, key, ok, tc.owner, tc.key)
		}
		if !Valid(tc.id) {
			t.Errorf("Valid refuses %q, Parse accepts it", tc.id)
		}
		if canonical && Canonical(o, key) != tc.id {
			t.Errorf("Canonical(Parse(%q)) = %q", tc.id, Canonical(o, key))
		}
		if len(tc.id) > MaxCanonical {
			t.Errorf("%q: %d bytes, more than %d", tc.id, len(tc.id), MaxCanonical)
		}
	}
	if n := len(long63 + ".abcdef~" + key128); n != MaxCanonical {
		t.Errorf("the longest canonical ID has %d bytes, MaxCanonical says %d", n, MaxCanonical)
	}
}

// TestIDEscapes: escaping for a URL path keeps a canonical ID as it is,
// and for a query keeps its prefix, so a load balancer's prefix rule sees the node.
func TestIDEscapes(t *testing.T) {
	t.Parallel()
	id := Canonical(Owner{"termgate-1", NewEpoch()}, "a.b:c_d-e")
	if got := url.PathEscape(id); got != id {
		t.Errorf("url.PathEscape(%q) = %q", id, got)
	}
	prefix, _, _ := strings.Cut(id, "~") // a query escapes the key's ":", never the prefix
	if got := url.QueryEscape(id); !strings.HasPrefix(got, prefix+"~") {
		t.Errorf("url.QueryEscape(%q) = %q, prefix changed", id, got)
	}
}

func TestNewEpochAndKey(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		e := NewEpoch()
		if !ValidEpoch(e) {
			t.Fatalf("NewEpoch() = %q, not an epoch", e)
		}
		seen[e] = true
		k := New()
		if o, key, ok := Parse(k); !ok || o != (Owner{}) || key != k {
			t.Fatalf("Parse(New() = %q) = %+v, %q, %v", k, o, key, ok)
		}
		id := Canonical(Owner{"termgate-0", e}, k)
		if o, key, ok := Parse(id); !ok || key != k || o.Epoch != e {
			t.Fatalf("Parse(%q) = %+v, %q, %v", id, o, key, ok)
		}
	}
	if len(seen) < 95 { // 30 random bits: collisions among 100 are rare
		t.Errorf("100 epochs, %d distinct", len(seen))
	}
}

func TestValidNode(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"termgate-0": true, "a": true, "0": true, "a-b-c": true, strings.Repeat("z", 63): true,
		"": false, "-a": false, "a-": false, "A": false, "a.b": false, "a_b": false, "a~b": false,
		strings.Repeat("z", 64): false, "termgate-0\n": false,
	} {
		if got := ValidNode(s); got != want {
			t.Errorf("ValidNode(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzParse: Parse agrees with Valid, round-trips canonical IDs and
// keeps bare IDs exactly as keys (today's IDs: TestKeyIsTodaysID).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"build-42", "termgate-1.q7bazk~build-42", "n.abcdef~k~l", "~", ".~", "a.aaaaaa~", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		o, key, ok := Parse(id)
		canonical := o != Owner{}
		if ok != Valid(id) {
			t.Fatalf("Parse(%q) ok %v, Valid %v", id, ok, Valid(id))
		}
		if !ok {
			if keyPattern().MatchString(id) {
				t.Fatalf("Parse refuses %q, a key", id)
			}
			return
		}
		if len(id) > MaxCanonical {
			t.Fatalf("%q accepted with %d bytes", id, len(id))
		}
		if canonical {
			if Canonical(o, key) != id || !ValidNode(o.Node) || !ValidEpoch(o.Epoch) {
				t.Fatalf("Parse(%q) = %+v, %q", id, o, key)
			}
		} else if key != id || o != (Owner{}) || !keyPattern().MatchString(id) {
			t.Fatalf("Parse(%q) bare = %+v, %q; keyPattern %v", id, o, key, keyPattern().MatchString(id))
		}
		if !keyPattern().MatchString(key) {
			t.Fatalf("key %q of %q is not a key", key, id)
		}
	})
}

// TestKeyIsTodaysID: a bare key is exactly what a single node accepted as
// an ID before cluster mode, so no client's ID changes meaning.
func TestKeyIsTodaysID(t *testing.T) {
	t.Parallel()
	if got := keyPattern().String(); got != `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$` {
		t.Fatalf("keyPattern = %s, not the single node's ID pattern", got)
	}
}
