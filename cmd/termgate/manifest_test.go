package main

import (
	"fmt"
	"strings"
	"testing"
)

// iniUnit is a unit file's keys by section, each key's values in order.
type iniUnit map[string]map[string][]string

// parseINI reads a unit file as systemd would: comments, [Section]
// lines and Key=Value lines, nothing else.
func parseINI(text string) (iniUnit, error) {
	u, section := iniUnit{}, ""
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if _, dup := u[section]; dup {
				return nil, fmt.Errorf("line %d: section %s twice", i+1, section)
			}
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || k == "" || strings.ContainsAny(k, " \t") {
				return nil, fmt.Errorf("line %d: not Key=Value in a section: %q", i+1, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u, nil
}

// splitExec splits an ExecStart value into words as systemd does for
// what systemdQuote writes: double quotes with C escapes, %% and $$.
func splitExec(line string) ([]string, error) {
	var words []string
	for line = strings.TrimLeft(line, " "); line != ""; line = strings.TrimLeft(line, " ") {
		var w strings.Builder
		if line[0] == '"' {
			i := 1
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' {
					i++
					if i == len(line) {
						return nil, fmt.Errorf("trailing backslash in %q", line)
					}
				}
				w.WriteByte(line[i])
			}
			if i == len(line) {
				return nil, fmt.Errorf("unterminated quote in %q", line)
			}
			line = line[i+1:]
		} else {
			end := strings.IndexByte(line, ' ')
			if end < 0 {
				end = len(line)
			}
			if strings.ContainsAny(line[:end], `"'\;`) {
				return nil, fmt.Errorf("unquoted special character in %q", line[:end])
			}
			w.WriteString(line[:end])
			line = line[end:]
		}
		word, err := unexpand(w.String())
		if err != nil {
			return nil, err
		}
		words = append(words, word)
	}
	return words, nil
}

// unexpand undoes the doubling of % and $; a single one is a specifier
// or a variable systemd would expand: an error.
func unexpand(w string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(w); i++ {
		if c := w[i]; c == '%' || c == '$' {
			if i+1 == len(w) || w[i+1] != c {
				return "", fmt.Errorf("%q: systemd expands %c%s", w, c, w[i+1:])
			}
			i++
		}
		b.WriteByte(w[i])
	}
	return b.String(), nil
}

func TestManifestSystemdQuote(t *testing.T) {
	t.Parallel()
	words := []string{"/usr/local/bin/termgate", "serve", "", "plain", "a b", `q"uote`, "it's", `back\slash`,
		"100%", "$HOME", "${X}", "semi;colon", "--flag=a b", "ünïcode"}
	var quoted []string
	for _, w := range words {
		q, err := systemdQuote(w)
		if err != nil {
			t.Fatalf("systemdQuote(%q): %v", w, err)
		}
		quoted = append(quoted, q)
	}
	line := strings.Join(quoted, " ")
	got, err := splitExec(line)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", words) {
		t.Errorf("ExecStart=%s\nsplits into %q\nwant %q", line, got, words)
	}
	for _, bad := range []string{"new\nline", "tab\t", "bell\a", "del\x7f"} {
		if _, err := systemdQuote(bad); err == nil || !strings.Contains(err.Error(), "control character") {
			t.Errorf("systemdQuote(%q): %v, want a control character error", bad, err)
		}
	}
}

func TestManifestNginxRefusesBadValues(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--server-name", "a;b"}, {"--server-name", ""}, {"--server-name", "x { }"},
		{"--listen", "80; include /etc/passwd"}, {"--listen", ""}, {"--upstream", "no-port"},
		{"--upstream", "127.0.0.1:8080;"}, {"--upstream", ":8080"}, {"extra"}, {"--bogus"},
	} {
		code, stdout, stderr := runCLI(t, "", append([]string{"manifest", "nginx"}, args...)...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("manifest nginx %q: status %d, stdout %q, stderr %q; want 2 and a message", args, code, stdout, stderr)
		}
	}
}

func TestManifestNginxHoldsTheFlags(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "", "manifest", "nginx", "--server-name", "gw.example.com gw2.example.com",
		"--listen", "127.0.0.1:8443", "--listen", "[::1]:8443", "--upstream", "127.0.0.1:9000")
	if code != 0 {
		t.Fatalf("status %d: %s", code, stderr)
	}
	for _, want := range []string{
		"server_name gw.example.com gw2.example.com;", "listen 127.0.0.1:8443;", "listen [::1]:8443;",
		"server 127.0.0.1:9000;", "proxy_http_version 1.1;", "proxy_set_header Upgrade $http_upgrade;",
		"proxy_set_header Connection $connection_upgrade;", "proxy_read_timeout 300s;", "proxy_send_timeout 300s;",
		"proxy_buffering off;", "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
		"# ssl_certificate ", "# ssl_certificate_key ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

func TestManifestNeedsAKind(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"manifest"}, {"manifest", "apache"}} {
		if code, _, stderr := runCLI(t, "", args...); code != 2 || stderr == "" {
			t.Errorf("termgate %q: status %d, stderr %q", args, code, stderr)
		}
	}
	if code, out, _ := runCLI(t, "", "manifest", "--help"); code != 0 || !strings.Contains(out, "--server-name") || !strings.Contains(out, "--binary") {
		t.Errorf("manifest --help: status %d:\n%s", code, out)
	}
}
