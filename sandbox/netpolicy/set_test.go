package netpolicy

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writePolicy(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestSet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	agents, ci := filepath.Join(dir, "agents.toml"), filepath.Join(dir, "ci.toml")
	writePolicy(t, agents, "allow = [\"api.example.com:443\"]\n")
	writePolicy(t, ci, "allow = [\"git.example.com\"]\ndeny = [\"ads.example.org\"]\n")
	s, err := NewSet(map[string]string{"agents": agents, "ci": ci})
	if err != nil {
		t.Fatal(err)
	}
	if names := s.Names(); !slices.Equal(names, []string{"agents", "ci"}) {
		t.Errorf("Names() = %q", names)
	}
	if _, ok := s.Lookup("none"); ok {
		t.Error("Lookup(none) found a policy")
	}
	p, ok := s.Lookup("agents")
	if !ok || !p.CheckName("tcp", "api.example.com", 443).Allowed {
		t.Fatalf("Lookup(agents) = %v, %v", p, ok)
	}
	digest := s.Digest()

	// The same rules written otherwise: the same digest.
	writePolicy(t, agents, "# the model\nallow = [\n  \"API.example.com.:443\",\n]\n")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if d := s.Digest(); d != digest {
		t.Error("rewriting the same rules changed the digest")
	}

	// A bad file: its policy keeps its rules, the other takes its new ones.
	writePolicy(t, agents, "allow = [\n  \"api.example.com:443\",\n  \"other.example.com:4430000\",\n]\n")
	writePolicy(t, ci, "allow = [\"git.example.com\", \"pkg.example.com:443\"]\n")
	err = s.Reload()
	var pe *ParseError
	if !errors.As(err, &pe) || pe.File != agents || pe.Line != 3 || !strings.Contains(err.Error(), agents+":3: ") || !strings.Contains(err.Error(), "keeps its previous rules") {
		t.Errorf("Reload with a bad file: %v", err)
	}
	if p, _ := s.Lookup("agents"); !slices.Equal(p.Allow(), []string{"API.example.com.:443"}) {
		t.Errorf("agents after a failed reload: %q", p.Allow())
	}
	if p, _ := s.Lookup("ci"); !p.CheckName("tcp", "pkg.example.com", 443).Allowed {
		t.Errorf("ci after a reload: %q", p.Allow())
	}
	if d := s.Digest(); d == digest {
		t.Error("a changed policy left the digest as it was")
	}

	// A policy file gone: the same.
	if err := os.Remove(ci); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), ci) {
		t.Errorf("Reload with a file gone: %v", err)
	}
	if _, ok := s.Lookup("ci"); !ok {
		t.Error("a policy whose file went is gone")
	}
}

func TestNewSetRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.toml"), filepath.Join(dir, "bad.toml")
	writePolicy(t, good, "allow = [\"a.example\"]\n")
	writePolicy(t, bad, "deny = [\"a.example\", \"*\", \"b.*\"]\n")
	if _, err := NewSet(map[string]string{"good": good, "bad": bad}); err == nil || !strings.Contains(err.Error(), bad+":1: ") {
		t.Errorf("NewSet with a bad file: %v", err)
	}
	for _, name := range []string{"host", "none", "Bad"} {
		if _, err := NewSet(map[string]string{name: good}); err == nil {
			t.Errorf("NewSet(%q) = nil error", name)
		}
	}
}

func TestSetDigest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.toml"), filepath.Join(dir, "b.toml")
	writePolicy(t, a, "allow = [\"x.example\"]\n")
	writePolicy(t, b, "allow = [\"x.example\"]\n")
	digest := func(files map[string]string) string {
		t.Helper()
		s, err := NewSet(files)
		if err != nil {
			t.Fatal(err)
		}
		return s.Digest()
	}
	one := digest(map[string]string{"p": a})
	if digest(map[string]string{"p": b}) != one {
		t.Error("two files with the same rules under one name differ")
	}
	if digest(map[string]string{"q": a}) == one {
		t.Error("another name has the same digest")
	}
	if digest(map[string]string{"p": a, "q": b}) == one {
		t.Error("a set with one more policy has the same digest")
	}
	if digest(map[string]string{}) == one {
		t.Error("an empty set has the same digest")
	}
	var none *Set
	if none.Digest() != digest(map[string]string{}) || none.Names() != nil || none.Reload() != nil {
		t.Error("a nil set is not an empty one")
	}
	if _, ok := none.Lookup("p"); ok {
		t.Error("a nil set has a policy")
	}
}
