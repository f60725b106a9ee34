package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve: every relative link in README.md and docs/ names
// a file or directory of the repository, and every #anchor a heading of
// its page, slugged as GitHub does.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	pages := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		anchors[path] = headingSlugs(string(data))
		return anchors[path]
	}
	links := 0
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(data)) {
			links++
			target, anchor, _ := strings.Cut(l.target, "#")
			path := filepath.Clean(filepath.Join(filepath.Dir(page), target))
			if target == "" {
				path = filepath.Clean(page)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s:%d: link %q: %v", page, l.line, l.target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", page, l.line, l.target, path, anchor)
			}
		}
	}
	if links == 0 {
		t.Error("found no links at all")
	}
}

// mdLink is a link of a Markdown page, with the line it is on.
type mdLink struct {
	target string
	line   int
}

var (
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
)

// markdownLinks returns the relative links of a page, outside code
// blocks and code spans: not URLs with a scheme, nor mail addresses.
func markdownLinks(page string) []mdLink {
	var out []mdLink
	fenced := false
	for i, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			if target := m[1]; !strings.Contains(target, "://") && !strings.HasPrefix(target, "mailto:") {
				out = append(out, mdLink{target, i + 1})
			}
		}
	}
	return out
}

// headingSlugs returns the anchors GitHub gives a page's headings: the
// heading's text in lower case, without punctuation but '-' and '_',
// spaces as '-', and "-1", "-2" after a repeated one.
func headingSlugs(page string) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(text))
		if n := seen[slug]; n > 0 {
			slugs[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			slugs[slug] = true
		}
		seen[slug]++
	}
	return slugs
}

// TestHeadingSlugs: GitHub's rules on the headings this repository has.
func TestHeadingSlugs(t *testing.T) {
	t.Parallel()
	got := headingSlugs("# termgate\n## Restarts, upgrades and crashes: executions live on\n" +
		"```\n# not a heading\n```\n## `termgate serve`\n### Audit trail\n## Audit trail\n")
	for _, want := range []string{"termgate", "restarts-upgrades-and-crashes-executions-live-on", "termgate-serve", "audit-trail", "audit-trail-1"} {
		if !got[want] {
			t.Errorf("no #%s in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a code block is no heading")
	}
}

// TestReadmeIsAFrontDoor: README.md stays a page a newcomer reads whole;
// what a reader needs beyond it goes to docs/.
func TestReadmeIsAFrontDoor(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 250 {
		t.Errorf("README.md has %d lines, more than 250: move the detail to docs/", n)
	}
}
