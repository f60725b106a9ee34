package wire

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// jsSources are the JS client's sources, read as text.
const jsSources = "../../web/client/src"

// jsOnly are codes a JS list may hold that wire does not define, each with
// why; none today. A difference is then a decision someone can see rather
// than a drift.
var jsOnly = map[string]map[string]string{}

// TestJSClientCodeLists checks that the JS client's code lists (export
// const NAME = Object.freeze([...]) under web/client/src, tests aside)
// match wire's: CODES is Codes, FATAL_ERRORS is Fatal,
// INPUT_REFUSED_ERRORS is InputRefused,
// apart from the codes jsOnly names.
func TestJSClientCodeLists(t *testing.T) {
	t.Parallel()
	sets := jsSets(t)
	for name, want := range map[string][]string{"CODES": codes, "FATAL_ERRORS": fatal, "INPUT_REFUSED_ERRORS": inputRefused} {
		got, ok := sets[name]
		if !ok {
			t.Errorf("no export const %s = Object.freeze([...]) in %s", name, jsSources)
			continue
		}
		var extra []string
		for _, c := range got {
			if !slices.Contains(want, c) && jsOnly[name][c] == "" {
				extra = append(extra, c)
			}
		}
		var missing []string
		for _, c := range want {
			if !slices.Contains(got, c) {
				missing = append(missing, c)
			}
		}
		for c := range jsOnly[name] {
			if !slices.Contains(got, c) {
				t.Errorf("%s no longer holds %q: drop it from jsOnly", name, c)
			}
		}
		if len(extra) > 0 || len(missing) > 0 {
			t.Errorf("JS %s differs from wire: it also holds %q and lacks %q", name, extra, missing)
		}
	}
}

var jsSet = regexp.MustCompile(`(?s)const\s+([A-Z_]+)\s*=\s*Object\.freeze\(\[(.*?)\]\)`)
var jsString = regexp.MustCompile(`'([^']*)'|"([^"]*)"`)

// jsSets reads every frozen constant list of strings in the JS client's sources.
func jsSets(t *testing.T) map[string][]string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(jsSources, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".js") && !strings.HasSuffix(path, ".test.js") {
			files = append(files, path)
		}
		return err
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("no JS sources in %s: %v", jsSources, err)
	}
	sets := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range jsSet.FindAllStringSubmatch(string(b), -1) {
			for _, s := range jsString.FindAllStringSubmatch(m[2], -1) {
				sets[m[1]] = append(sets[m[1]], strings.TrimSpace(s[1]+s[2]))
			}
		}
	}
	return sets
}

// pySources is the Python client's wire module.
const pySources = "../../gateway/client/python/src/termgate/_wire.py"

var pyTuple = regexp.MustCompile(`(?s)\n([A-Z_]+) = \((.*?)\)`)

// TestPythonClientCodeLists checks that the Python client's code tuples
// match wire's: CODES is Codes, FATAL is Fatal, INPUT_REFUSED is
// InputRefused.
func TestPythonClientCodeLists(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(pySources)
	if err != nil {
		t.Fatal(err)
	}
	sets := map[string][]string{}
	for _, m := range pyTuple.FindAllStringSubmatch(string(b), -1) {
		for _, s := range jsString.FindAllStringSubmatch(m[2], -1) {
			sets[m[1]] = append(sets[m[1]], s[1]+s[2])
		}
	}
	for name, want := range map[string][]string{"CODES": codes, "FATAL": fatal, "INPUT_REFUSED": inputRefused} {
		got := slices.Sorted(slices.Values(sets[name]))
		if w := slices.Sorted(slices.Values(want)); !slices.Equal(got, w) {
			t.Errorf("Python %s is %q, wire's %q", name, got, w)
		}
	}
}
