package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/termgate/termgate/sandbox/sandboxtest"
)

// TestCompletionHasEveryCommandAndFlag: the scripts come from commands()
// and the flag sets, so every command and every flag is completed.
func TestCompletionHasEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, script, stderr := runCLI(t, "", "completion", shell)
		if code != 0 {
			t.Fatalf("completion %s: status %d, %s", shell, code, stderr)
		}
		for _, c := range commands() {
			if !strings.Contains(script, c.name) {
				t.Errorf("completion %s lacks command %s", shell, c.name)
			}
			for _, f := range completionFlags(c) {
				want := "--" + f.name
				if shell == "fish" {
					want = "-l " + f.name
				}
				if !strings.Contains(script, want) {
					t.Errorf("completion %s lacks %s of %s", shell, want, c.name)
				}
			}
		}
		if sh, err := exec.LookPath(shell); err == nil && shell != "fish" {
			if out, err := exec.Command(sh, "-n", "-c", script).CombinedOutput(); err != nil {
				t.Errorf("completion %s: %s -n: %v: %s", shell, shell, err, out)
			}
		}
	}
	if code, _, _ := runCLI(t, "", "completion", "tcsh"); code != 2 {
		t.Errorf("completion tcsh: status %d, want 2", code)
	}
}

// TestEveryCommandHasHelp: --help exits 0 with the usage line, the
// flags with double dashes and examples.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	singleDash := regexp.MustCompile(`(?m)^  -[a-z]`)
	for _, c := range commands() {
		code, out, stderr := runCLI(t, "", c.name, "--help")
		if code != 0 || !strings.HasPrefix(out, "Usage: termgate "+c.name) || !strings.Contains(out, "\nExamples:\n  ") {
			t.Errorf("termgate %s --help: status %d, stdout %q, stderr %q", c.name, code, out, stderr)
		}
		if singleDash.MatchString(out) {
			t.Errorf("termgate %s --help shows single-dash flags:\n%s", c.name, out)
		}
		for _, f := range completionFlags(c) {
			if !strings.Contains(out, "\n  --"+f.name) {
				t.Errorf("termgate %s --help lacks --%s", c.name, f.name)
			}
		}
	}
	code, out, _ := runCLI(t, "", "help", "logs")
	if code != 0 || !strings.HasPrefix(out, "Usage: termgate logs") {
		t.Errorf("termgate help logs: status %d, %q", code, out)
	}
	if code, _, stderr := runCLI(t, "", "logs", "--bogus"); code != 2 || !strings.Contains(stderr, "not defined: --bogus") {
		t.Errorf("termgate logs --bogus: status %d, stderr %q", code, stderr)
	}
}

// TestCompletionValuesAreTheFlagsOwn: every value completion names a flag
// of its command that takes a value, and every word it offers is one the
// flag's help names and the flag accepts.
func TestCompletionValuesAreTheFlagsOwn(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		if c.linux && runtime.GOOS != "linux" {
			continue // no flags to complete here
		}
		flags := map[string]completionFlag{}
		for _, f := range completionFlags(c) {
			flags[f.name] = f
		}
		for name, v := range c.values {
			f, ok := flags[name]
			if !ok || !f.takesValue {
				t.Errorf("%s: completion of --%s, which is not a flag with a value", c.name, name)
				continue
			}
			if (len(v.words) > 0) == (v.file || v.dir) || (v.file && v.dir) {
				t.Errorf("%s --%s: completes to %+v: want words, a file or a directory", c.name, name, v)
			}
			for _, word := range v.words {
				if !strings.Contains(f.usage, word) {
					t.Errorf("%s --%s completes %q, which its help (%q) does not name", c.name, name, word, f.usage)
				}
				if err := c.flags().Set(name, word); err != nil {
					t.Errorf("%s --%s completes %q, which it refuses: %v", c.name, name, word, err)
				}
			}
		}
	}
}

// completionDir returns a directory holding a file and a directory, for
// the completion of paths.
func completionDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "key.pem"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "ws-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// completionCases are command lines, the cursor at their end, and what
// completing their last word offers.
var completionCases = []struct {
	line string
	want []string
}{
	{"termgate ser", []string{"serve"}},
	{"termgate exec --net", []string{"--network"}},
	{"termgate exec --network ", []string{"none", "host"}},
	{"termgate exec --network h", []string{"host"}},
	{"termgate exec --network=", []string{"none", "host"}},
	{"termgate exec --network=h", []string{"host"}},
	{"termgate exec --proc p", []string{"private"}},
	{"termgate serve --proc ", []string{"auto", "none", "private"}},
	{"termgate serve --log-level w", []string{"warn"}},
	{"termgate completion z", []string{"zsh"}},
	{"termgate help at", []string{"attach"}},
	{"termgate token --secret-file ke", []string{"key.pem"}},
	{"termgate exec --workspace ", []string{"ws-dir"}},
	{"termgate serve --tls-cert ws", []string{"ws-dir"}},
	{"termgate exec --memory ", nil}, // any size: bash's own file completion
	{"termgate run --pty x", nil},    // --pty takes no value
	{"termgate run -- /bin/s", nil},  // the command: files
	{"termgate attach --id b", nil},  // ids: no list offline
	{"termgate completion --h", []string{"--help"}},
}

// bashWords splits line as bash hands it to a completion function: at
// spaces, and around the '=' of --flag=value.
func bashWords(line string) []string {
	var words []string
	for _, w := range strings.Split(line, " ") {
		if name, value, ok := strings.Cut(w, "="); ok && strings.HasPrefix(w, "--") {
			words = append(words, name, "=")
			if value != "" {
				words = append(words, value)
			}
			continue
		}
		words = append(words, w)
	}
	return words
}

// skipOffLinux reports whether line completes a sandbox command's flags,
// which other systems do not have.
func skipOffLinux(line string) bool {
	c, _ := commandNamed(strings.Fields(line)[1])
	return c.linux && runtime.GOOS != "linux"
}

// TestBashCompletesFlagValues runs the generated function in bash as
// bash's completion would, and compares what it offers.
func TestBashCompletesFlagValues(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	sandboxtest.Need(t, "bash", err)
	_, script, _ := runCLI(t, "", "completion", "bash")
	dir := completionDir(t)
	for _, c := range completionCases {
		if skipOffLinux(c.line) {
			continue
		}
		words := bashWords(c.line)
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = shellQuote(w)
		}
		call := fmt.Sprintf("COMP_WORDS=(%s); COMP_CWORD=%d; _termgate; printf '%%s\\n' \"${COMPREPLY[@]}\"",
			strings.Join(quoted, " "), len(words)-1)
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", script+call)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if got := strings.Fields(string(out)); err != nil || !slices.Equal(got, c.want) {
			t.Errorf("bash completes %q (words %q) to %q (%v), want %q", c.line, words, got, err, c.want)
		}
	}
}

// shellWithScript finds shell, skipping the test where it is missing (an
// optional shell: bash is tested everywhere), and writes its generated
// script as name in home, a directory of its own for the shell's state.
// dir is completionDir's.
func shellWithScript(t *testing.T, shell, name string) (path, dir, home, file string) {
	t.Helper()
	path, err := exec.LookPath(shell)
	if err != nil {
		t.Skipf("%s not installed (apt-get install %s): its script is checked as text only", shell, shell)
	}
	_, script, _ := runCLI(t, "", "completion", shell)
	dir, home = completionDir(t), t.TempDir()
	file = filepath.Join(home, name)
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, dir, home, file
}

// TestFishCompletesFlagValues asks fish itself (complete -C) what it
// offers with the generated completions loaded.
func TestFishCompletesFlagValues(t *testing.T) {
	t.Parallel()
	fish, dir, home, file := shellWithScript(t, "fish", "termgate.fish")
	for _, c := range completionCases {
		if skipOffLinux(c.line) || c.want == nil {
			continue // fish adds its own file completion where the script offers nothing
		}
		cmd := exec.Command(fish, "--no-config", "-c", "source "+shellQuote(file)+"; complete -C "+shellQuote(c.line))
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_DATA_HOME="+home)
		out, err := cmd.CombinedOutput()
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			v, _, _ := strings.Cut(l, "\t")
			v = v[strings.LastIndex(v, "=")+1:] // --network=host offers host
			if v != "" {
				got = append(got, strings.TrimSuffix(v, "/"))
			}
		}
		slices.Sort(got)
		if want := slices.Sorted(slices.Values(c.want)); err != nil || !slices.Equal(got, want) {
			t.Errorf("fish completes %q to %q (%v: %s), want %q", c.line, got, err, out, want)
		}
	}
}

// TestZshCompletesFlagValues types each line and a Tab into an
// interactive zsh on a pseudo-terminal (zsh/zpty) with the generated
// function loaded, and waits, at most a minute, until what it offers
// shows on the screen: the one completion written out, or the list.
func TestZshCompletesFlagValues(t *testing.T) {
	t.Parallel()
	zsh, dir, home, file := shellWithScript(t, "zsh", "_termgate")
	for _, c := range completionCases {
		if skipOffLinux(c.line) || c.want == nil {
			continue
		}
		t.Run(c.line, func(t *testing.T) {
			t.Parallel()
			// The list is sorted; "RE""ADY" shows as READY only once run.
			pattern := "*" + strings.Join(slices.Sorted(slices.Values(c.want)), "*") + "*"
			drive := strings.Join([]string{
				"zmodload zsh/zpty",
				"zpty z " + shellQuote(zsh) + " -f -i",
				"zpty -w z " + shellQuote(`PROMPT='> '; autoload -Uz compinit; compinit -u -D; source `+shellQuote(file)+`; print RE""ADY`),
				"zpty -r z out '*READY*'",
				"zpty -w -n z " + shellQuote(c.line) + "$'\\t'",
				"zpty -r z out " + shellQuote(pattern),
				"zpty -d z",
			}, "\n")
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, zsh, "-f", "-c", drive)
			cmd.Dir, cmd.WaitDelay = dir, 5*time.Second
			cmd.Env = append(os.Environ(), "HOME="+home, "TERM=dumb", "COLUMNS=80")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("zsh did not offer %q for %q within a minute: %v: %q", c.want, c.line, err, out)
			}
		})
	}
}
