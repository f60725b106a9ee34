package netpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Bounds on a policy file, enforced by Parse and Load.
const (
	// MaxFileBytes bounds a policy file: 1024 rules of 60 bytes fit.
	MaxFileBytes = 64 << 10
	// MaxRules bounds the rules of one policy, allow and deny together.
	MaxRules = 1024
	// MaxNameLen bounds a host name, in bytes without its trailing dot, as
	// DNS does.
	MaxNameLen = 253
	// MaxPolicyNameLen bounds a policy's name.
	MaxPolicyNameLen = 63
)

// Names a policy cannot have: --network takes them with their own
// meaning.
const (
	NameNone = "none" // no network at all
	NameHost = "host" // the host's network, no policy
)

var policyName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`) })

// ValidName reports why name cannot name a policy, or nil: a name is 1 to
// MaxPolicyNameLen lower-case letters, digits and '-', not starting with
// '-', and neither NameNone nor NameHost.
func ValidName(name string) error {
	switch {
	case name == NameNone || name == NameHost:
		return fmt.Errorf("netpolicy: %q is reserved and cannot name a policy", name)
	case !policyName().MatchString(name):
		return fmt.Errorf("netpolicy: policy name %q: want 1 to %d of a-z, 0-9 and '-', not starting with '-'", truncate(name), MaxPolicyNameLen)
	}
	return nil
}

// A Policy is a parsed policy file: its allow and deny rules. It is never
// changed once parsed, so any number of goroutines may use it at once.
// A nil *Policy refuses every connection.
type Policy struct {
	name  string
	file  string
	allow []rule
	deny  []rule
}

// Name is the policy's name.
func (p *Policy) Name() string { return p.name }

// File is the path the policy was loaded from, "" when parsed from memory.
func (p *Policy) File() string { return p.file }

// Allow is the allow rules, as written.
func (p *Policy) Allow() []string { return ruleTexts(p.allow) }

// Deny is the deny rules, as written.
func (p *Policy) Deny() []string { return ruleTexts(p.deny) }

func ruleTexts(rs []rule) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.text
	}
	return out
}

// Digest identifies what the policy allows and denies: two policies with
// the same name and the same rules, in any order and however written
// (case, trailing dots, default ports, comments), have the same digest.
// It is a hexadecimal SHA-256.
func (p *Policy) Digest() string {
	h := sha256.New()
	p.writeCanonical(h)
	return hex.EncodeToString(h.Sum(nil))
}

// writeCanonical writes the policy's name and its rules in canonical form,
// sorted, one a line.
func (p *Policy) writeCanonical(w io.Writer) {
	var lines []string
	for _, r := range p.allow {
		lines = append(lines, "allow "+r.canonical(false))
	}
	for _, r := range p.deny {
		lines = append(lines, "deny "+r.canonical(true))
	}
	slices.Sort(lines)
	lines = slices.Compact(lines)
	fmt.Fprintf(w, "policy %s\n%s\n", p.name, strings.Join(lines, "\n"))
}

// A ParseError is a policy file that cannot be used, with the line of its
// fault when one is known.
type ParseError struct {
	Policy string // the policy's name
	File   string // the file's path, "" when parsed from memory
	Line   int    // 1-based, 0 when no line is at fault
	Msg    string
}

func (e *ParseError) Error() string {
	where := e.File
	switch {
	case where != "" && e.Line > 0:
		where = fmt.Sprintf("%s:%d", where, e.Line)
	case e.Line > 0:
		where = fmt.Sprintf("line %d", e.Line)
	}
	if where == "" {
		return fmt.Sprintf("netpolicy: policy %q: %s", e.Policy, e.Msg)
	}
	return fmt.Sprintf("netpolicy: policy %q: %s: %s", e.Policy, where, e.Msg)
}

// Parse parses data, a policy file in TOML, as the policy called name.
// The file holds two optional arrays of strings, allow and deny, and
// nothing else:
//
//	allow = ["api.example.com:443", "*.example.org:443", "10.1.2.0/24:5432"]
//	deny  = ["ads.example.org"]
//
// Errors are *ParseError, naming the line at fault.
func Parse(name string, data []byte) (*Policy, error) {
	return parse(name, "", data)
}

// Load reads and parses the policy file at path as the policy called
// name. The file is a regular file of at most MaxFileBytes that neither
// the group nor others may write, owned by this user or root: it decides
// what sandboxes reach.
func Load(name, path string) (*Policy, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, &ParseError{Policy: name, File: path, Msg: err.Error()}
	}
	return parse(name, path, data)
}

func parse(name, file string, data []byte) (*Policy, error) {
	fail := func(line int, format string, args ...any) error {
		return &ParseError{Policy: name, File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if err := ValidName(name); err != nil {
		return nil, fail(0, "%s", strings.TrimPrefix(err.Error(), "netpolicy: "))
	}
	if len(data) > MaxFileBytes {
		return nil, fail(0, "larger than %d bytes", MaxFileBytes)
	}
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, fail(row, "%s", de.Error())
		}
		return nil, fail(0, "%v", err)
	}
	pol := &Policy{name: name, file: file}
	if err := pol.readRules(data, fail); err != nil {
		return nil, err
	}
	return pol, nil
}

// readRules walks the document, already known to be valid TOML, for its
// allow and deny arrays, keeping the line of each rule.
func (pol *Policy) readRules(data []byte, fail func(int, string, ...any) error) error {
	var p unstable.Parser
	p.Reset(data)
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.KeyValue && e.Kind != unstable.Table && e.Kind != unstable.ArrayTable {
			continue
		}
		key, line := keyOf(&p, e)
		if e.Kind != unstable.KeyValue {
			return fail(line, "unknown table [%s]: a policy holds only allow and deny", key)
		}
		if key != "allow" && key != "deny" {
			return fail(line, "unknown key %q: a policy holds only allow and deny", key)
		}
		if err := pol.readList(&p, e.Value(), key == "deny", line, fail); err != nil {
			return err
		}
	}
	if err := p.Error(); err != nil {
		return fail(0, "%v", err)
	}
	return nil
}

// readList reads one allow or deny array.
func (pol *Policy) readList(p *unstable.Parser, v *unstable.Node, deny bool, keyLine int, fail func(int, string, ...any) error) error {
	key := "allow"
	if deny {
		key = "deny"
	}
	if v.Kind != unstable.Array {
		return fail(keyLine, "%s is %s, not an array of strings", key, kindName(v.Kind))
	}
	it := v.Children()
	for it.Next() {
		n := it.Node()
		line := keyLine
		if n.Raw.Length > 0 {
			line = p.Shape(n.Raw).Start.Line
		}
		if n.Kind != unstable.String {
			return fail(line, "%s holds %s, not only strings", key, kindName(n.Kind))
		}
		if len(pol.allow)+len(pol.deny) >= MaxRules {
			return fail(line, "more than %d rules", MaxRules)
		}
		r, err := parseRule(string(n.Data), deny)
		if err != nil {
			return fail(line, "rule %q: %v", truncate(string(n.Data)), err)
		}
		r.line = line
		if deny {
			pol.deny = append(pol.deny, r)
		} else {
			pol.allow = append(pol.allow, r)
		}
	}
	return nil
}

// keyOf is a key-value's or table's dotted key and its line.
func keyOf(p *unstable.Parser, e *unstable.Node) (string, int) {
	var parts []string
	line := 0
	k := e.Key()
	for k.Next() {
		if line == 0 && k.Node().Raw.Length > 0 {
			line = p.Shape(k.Node().Raw).Start.Line
		}
		parts = append(parts, string(k.Node().Data))
	}
	return strings.Join(parts, "."), line
}

// kindName names a TOML value's type with its article.
func kindName(k unstable.Kind) string {
	switch k {
	case unstable.String:
		return "a string"
	case unstable.Integer:
		return "an integer"
	case unstable.Float:
		return "a float"
	case unstable.Bool:
		return "a boolean"
	case unstable.Array:
		return "an array"
	case unstable.InlineTable:
		return "a table"
	}
	return "a date or time"
}

// readFile reads path, a regular file of at most MaxFileBytes that only
// its owner, this user or root, may write.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("mode %04o lets the group or others write it, and so choose what sandboxes reach; run chmod go-w %s", perm, path)
	}
	if err := checkOwner(fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	return data, nil
}
