package netpolicy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	data := `# agents: what a coding agent reaches
allow = [
  "api.example.com:443",   # the model
  "*.example.org:443",
  'registry.example.net',
  "10.1.2.0/24:5432",
]
deny = ["ads.example.org"]
`
	p, err := Parse("agents", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "agents" || p.File() != "" {
		t.Errorf("Name, File = %q, %q", p.Name(), p.File())
	}
	if want := []string{"api.example.com:443", "*.example.org:443", "registry.example.net", "10.1.2.0/24:5432"}; !slices.Equal(p.Allow(), want) {
		t.Errorf("Allow() = %q, want %q", p.Allow(), want)
	}
	if want := []string{"ads.example.org"}; !slices.Equal(p.Deny(), want) {
		t.Errorf("Deny() = %q, want %q", p.Deny(), want)
	}
	if lines := []int{p.allow[0].line, p.allow[3].line, p.deny[0].line}; !slices.Equal(lines, []int{3, 6, 8}) {
		t.Errorf("rule lines = %v, want [3 6 8]", lines)
	}
	for _, empty := range []string{"", "# nothing\n", "allow = []\ndeny = []\n"} {
		p, err := Parse("empty", []byte(empty))
		if err != nil {
			t.Errorf("Parse(%q): %v", empty, err)
		} else if len(p.Allow())+len(p.Deny()) != 0 {
			t.Errorf("Parse(%q) has rules", empty)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		data string
		line int
		want string
	}{
		{"allow = [\n  \"api.example.com:443\",\n  \"bad rule\",\n]\n", 3, `rule "bad rule": white space`},
		{"allow = [\"ok.example\", \"ok2.example\"]\n\ndeny = [\"10.0.0.1/8\"]\n", 3, "did you mean 10.0.0.0/8"},
		{"allow = [\"a.example\",\n\"b.example\", \"c.example:0\"]\n", 2, `port "0"`},
		{"allow = ['''\nlong.example:99999''']\n", 1, "port"},
		{"alow = [\"a.example\"]\n", 1, `unknown key "alow"`},
		{"allow = []\nAllow = [\"a.example\"]\n", 2, `unknown key "Allow"`},
		{"allow = []\n\n[deny]\nx = 1\n", 3, "unknown table [deny]"},
		{"[[allow]]\n", 1, "unknown table [allow]"},
		{"allow.x = [\"a.example\"]\n", 1, `unknown key "allow.x"`},
		{"allow = \"a.example\"\n", 1, "allow is a string, not an array of strings"},
		{"deny = 3\n", 1, "deny is an integer"},
		{"allow = [\n\"a.example\",\n3]\n", 3, "allow holds an integer"},
		{"allow = [[\"a.example\"]]\n", 1, "allow holds an array"},
		{"allow = [{x = 1}]\n", 1, "allow holds a table"},
		{"allow = []\nallow = []\n", 2, ""},
		{"allow = [\n\"a.example\"\n", 0, ""}, // unterminated: some line
		{"allow = [\"bücher.example\"]\n", 1, "non-ASCII"},
	} {
		_, err := Parse("p", []byte(tc.data))
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q) = %v, want a *ParseError", tc.data, err)
			continue
		}
		if tc.line != 0 && pe.Line != tc.line || pe.Line == 0 {
			t.Errorf("Parse(%q): line %d, want %d: %v", tc.data, pe.Line, tc.line, err)
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), fmt.Sprintf("line %d: ", pe.Line)) {
			t.Errorf("Parse(%q) = %q, want it to hold %q and its line", tc.data, err, tc.want)
		}
	}
}

func TestBounds(t *testing.T) {
	t.Parallel()
	rules := func(n int) string {
		var b strings.Builder
		b.WriteString("allow = [\n")
		for i := range n {
			fmt.Fprintf(&b, "%q,\n", fmt.Sprintf("h%d.example:443", i))
		}
		b.WriteString("]\n")
		return b.String()
	}
	if _, err := Parse("p", []byte(rules(MaxRules))); err != nil {
		t.Errorf("%d rules: %v", MaxRules, err)
	}
	_, err := Parse("p", []byte(rules(MaxRules+1)))
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != MaxRules+2 || !strings.Contains(pe.Msg, "more than 1024 rules") {
		t.Errorf("%d rules: %v, want more than %d rules at line %d", MaxRules+1, err, MaxRules, MaxRules+2)
	}
	split := "allow = [\"a.example\"]\ndeny = [" + strings.Repeat(`"d.example",`, MaxRules) + "]\n"
	if _, err := Parse("p", []byte(split)); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("allow and deny together over %d rules: %v", MaxRules, err)
	}

	pad := func(n int) []byte {
		head := "allow = [\"a.example\"]\n#"
		return []byte(head + strings.Repeat("x", n-len(head)))
	}
	if _, err := Parse("p", pad(MaxFileBytes)); err != nil {
		t.Errorf("a file of %d bytes: %v", MaxFileBytes, err)
	}
	if _, err := Parse("p", pad(MaxFileBytes+1)); err == nil || !strings.Contains(err.Error(), "larger than 65536 bytes") {
		t.Errorf("a file of %d bytes: %v", MaxFileBytes+1, err)
	}

	long := strings.Repeat("a", 61) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 63)
	if len(long) != MaxNameLen {
		t.Fatalf("long name of %d bytes", len(long))
	}
	if _, err := Parse("p", []byte(fmt.Sprintf("allow = [%q, %q]", long, "*."+long+".:443"))); err != nil {
		t.Errorf("a name of %d bytes: %v", MaxNameLen, err)
	}
	if _, err := Parse("p", []byte(fmt.Sprintf("allow = [%q]", "a"+long))); err == nil || !strings.Contains(err.Error(), "at most 253") {
		t.Errorf("a name of %d bytes: %v", MaxNameLen+1, err)
	}
}

func TestValidName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a", "agents", "ci-2", "0", strings.Repeat("a", MaxPolicyNameLen)} {
		if err := ValidName(name); err != nil {
			t.Errorf("ValidName(%q) = %v", name, err)
		}
	}
	for _, name := range []string{"", "none", "host", "-a", "A", "a_b", "a.b", "a b", strings.Repeat("a", MaxPolicyNameLen+1), "é"} {
		if err := ValidName(name); err == nil {
			t.Errorf("ValidName(%q) = nil", name)
		}
		if _, err := Parse(name, nil); err == nil {
			t.Errorf("Parse(%q, nil) = nil error", name)
		}
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.toml", "allow = [\"a.example\"]\n", 0o644)
	p, err := Load("good", good)
	if err != nil || p.File() != good || !slices.Equal(p.Allow(), []string{"a.example"}) {
		t.Errorf("Load(good) = %v, %v", p, err)
	}
	bad := write("bad.toml", "allow = [\n\"a.example:x\"]\n", 0o600)
	if _, err := Load("bad", bad); err == nil || !strings.Contains(err.Error(), bad+":2: ") {
		t.Errorf("Load(bad) = %v, want an error naming %s:2", err, bad)
	}
	for _, tc := range []struct{ path, want string }{
		{write("open.toml", "", 0o666), "lets the group or others write it"},
		{write("group.toml", "", 0o620), "lets the group or others write it"},
		{dir, "not a regular file"},
		{filepath.Join(dir, "missing.toml"), "no such file"},
	} {
		if _, err := Load("p", tc.path); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("Load(%s) = %v, want %q", tc.path, err, tc.want)
		}
	}
	big := write("big.toml", "#"+strings.Repeat("x", MaxFileBytes), 0o600)
	if _, err := Load("p", big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) = %v", err)
	}
}

func TestPolicyDigest(t *testing.T) {
	t.Parallel()
	digest := func(name, data string) string {
		t.Helper()
		p, err := Parse(name, []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return p.Digest()
	}
	base := digest("p", `allow = ["a.example:443", "b.example"]`+"\n"+`deny = ["c.example"]`)
	for _, same := range []string{
		"# the same\ndeny = [\"C.example.\"]\nallow = [\"b.example\", \"A.EXAMPLE:443\"]\n",
		"allow = [\"b.example\", \"a.example:443\", \"tcp:a.example:443\"]\ndeny = [\"c.example\"]\n",
	} {
		if d := digest("p", same); d != base {
			t.Errorf("digest of %q differs", same)
		}
	}
	for _, other := range []string{
		"allow = [\"a.example:443\", \"b.example:443\"]\ndeny = [\"c.example\"]\n",
		"allow = [\"a.example:443\", \"b.example\"]\ndeny = [\"c.example:443\"]\n",
		"allow = [\"a.example:443\", \"b.example\", \"c.example\"]\n",
	} {
		if d := digest("p", other); d == base {
			t.Errorf("digest of %q is the same", other)
		}
	}
	if digest("q", `allow = ["a.example:443", "b.example"]`+"\n"+`deny = ["c.example"]`) == base {
		t.Error("the policy's name does not change its digest")
	}
}

// FuzzParse: any file either parses or is refused with a *ParseError,
// never a panic.
func FuzzParse(f *testing.F) {
	f.Add([]byte("allow = [\"api.example.com:443\", \"*.example.org\"]\ndeny = [\"ads.example.org\"]\n"))
	f.Add([]byte("allow = [\n# c\n'10.0.0.0/8:1-2', \"[fd00::/64]:443\"]\n"))
	f.Add([]byte("[x]\nallow=1"))
	f.Add([]byte("allow = [[], {}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Parse("p", data)
		var pe *ParseError
		if err != nil && !errors.As(err, &pe) {
			t.Fatalf("Parse(%q) = %v, not a *ParseError", data, err)
		}
	})
}
