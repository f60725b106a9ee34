package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// writeConfig writes text as a config file (mode 0644) and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "serve.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigPrecedence: for each kind of flag (string, list, boolean,
// duration, parsed), a flag beats the environment, which beats the
// config file, which beats the default.
func TestConfigPrecedence(t *testing.T) {
	type kind struct {
		name, env                 string
		file                      string // the key's line in the file
		envVal, flagVal           string
		got                       func(*serveOptions) any
		def, fromFile, fromEnv, f any
	}
	kinds := []kind{
		{name: "listen", env: "TERMGATE_LISTEN", file: `listen = "127.0.0.1:1001"`, envVal: "127.0.0.1:1002", flagVal: "127.0.0.1:1003",
			got: func(o *serveOptions) any { return o.listen }, def: "127.0.0.1:8080", fromFile: "127.0.0.1:1001", fromEnv: "127.0.0.1:1002", f: "127.0.0.1:1003"},
		{name: "origin", env: "TERMGATE_ORIGIN", file: `origin = ["https://a.example", "https://b,c.example"]`, envVal: "https://e.example", flagVal: "https://f.example",
			got: func(o *serveOptions) any { return o.origins }, def: []string(nil), fromFile: []string{"https://a.example", "https://b,c.example"}, fromEnv: []string{"https://e.example"}, f: []string{"https://f.example"}},
		{name: "query-token", env: "TERMGATE_QUERY_TOKEN", file: `query-token = true`, envVal: "false", flagVal: "true",
			got: func(o *serveOptions) any { return o.queryToken }, def: false, fromFile: true, fromEnv: false, f: true},
		{name: "jwt-leeway", env: "TERMGATE_JWT_LEEWAY", file: `jwt-leeway = "10s"`, envVal: "20s", flagVal: "40s",
			got: func(o *serveOptions) any { return o.leeway }, def: 30 * time.Second, fromFile: 10 * time.Second, fromEnv: 20 * time.Second, f: 40 * time.Second},
		{name: "memory", env: "TERMGATE_MEMORY", file: `memory = "2G"`, envVal: "3G", flagVal: "4G",
			got: func(o *serveOptions) any { return o.policy.Limits.Memory }, def: int64(1 << 30), fromFile: int64(2 << 30), fromEnv: int64(3 << 30), f: int64(4 << 30)},
		{name: "pids", env: "TERMGATE_PIDS", file: `pids = 100`, envVal: "200", flagVal: "300",
			got: func(o *serveOptions) any { return o.policy.Limits.Pids }, def: int64(512), fromFile: int64(100), fromEnv: int64(200), f: int64(300)},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			path := writeConfig(t, "dev = true\n"+k.file+"\n")
			for _, c := range []struct {
				layer string
				file  bool
				env   bool
				flag  bool
				want  any
			}{
				{"default", false, false, false, k.def},
				{"file", true, false, false, k.fromFile},
				{"env over file", true, true, false, k.fromEnv},
				{"flag over env and file", true, true, true, k.f},
				{"flag over file", true, false, true, k.f},
			} {
				args := []string{"--dev"}
				if c.file {
					args = append(args, "--config", path)
				}
				if c.flag {
					args = append(args, "--"+k.name+"="+k.flagVal)
				}
				if c.env {
					t.Setenv(k.env, k.envVal)
				} else {
					os.Unsetenv(k.env)
				}
				o, err := parseServe(args, io.Discard)
				if err != nil {
					t.Fatalf("%s: %v", c.layer, err)
				}
				if got := k.got(o); !reflect.DeepEqual(got, c.want) {
					t.Errorf("%s: %s = %#v, want %#v", c.layer, k.name, got, c.want)
				}
			}
		})
	}
}

// TestConfigFromEnvironment: TERMGATE_CONFIG names the file too, and
// --config beats it.
func TestConfigFromEnvironment(t *testing.T) {
	a, b := writeConfig(t, "dev = true\nlisten = \"127.0.0.1:1\"\n"), writeConfig(t, "dev = true\nlisten = \"127.0.0.1:2\"\n")
	t.Setenv("TERMGATE_CONFIG", a)
	o, err := parseServe(nil, io.Discard)
	if err != nil || o.listen != "127.0.0.1:1" {
		t.Fatalf("TERMGATE_CONFIG: %v, %v", o, err)
	}
	o, err = parseServe([]string{"--config", b}, io.Discard)
	if err != nil || o.listen != "127.0.0.1:2" {
		t.Fatalf("--config over TERMGATE_CONFIG: %v, %v", o, err)
	}
}

// TestConfigErrors: an unknown key, a wrong type, a duplicate key, a bad
// value or a file others may write is refused with an error naming the
// file, the line and the key; an unknown key or a wrong type never shows
// the value (a secret pasted under a wrong key stays out of logs).
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value-never-printed"
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"unknown key", "dev = true\n\njwt-secret = \"" + secret + "\"\n", []string{":3:", "jwt-secret", "unknown"}},
		{"string wanted", "listen = 8080\n", []string{":1:", "listen", "want a string", "integer"}},
		{"boolean wanted", "\ndev = \"" + secret + "\"\n", []string{":2:", "dev", "want a boolean", "string"}},
		{"list wanted", "origin = \"" + secret + "\"\n", []string{":1:", "origin", "want an array of strings"}},
		{"list of strings wanted", "command = [\"/bin/sh\", 7]\n", []string{":1:", "command", "want an array of strings"}},
		{"duration", "jwt-leeway = \"soon\"\n", []string{":1:", "jwt-leeway", "invalid duration"}},
		{"size", "dev = true\nmemory = \"lots\"\n", []string{":2:", "memory"}},
		{"duplicate", "dev = true\nlisten = \"" + secret + "\"\nlisten = \"b\"\n", []string{":3:", "listen", "already"}},
		{"table", "[sandbox]\nmemory = \"1G\"\n", []string{":1:", "sandbox", "unknown"}},
		{"table of a flag", "memory.x = 1\n", []string{":1:", "memory", "table"}},
		{"syntax", "dev = true\nlisten = \n", []string{":2:"}},
		{"config in config", "config = \"/etc/x.toml\"\n", []string{":1:", "config", "cannot be set in a config file"}},
		{"float", "pids = 1.5\n", []string{":1:", "pids", "float"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, c.text)
			code, _, stderr := runCLI(t, "", "serve", "--config", path)
			if code != 2 {
				t.Fatalf("status %d, want 2: %s", code, stderr)
			}
			for _, w := range append(c.want, path) {
				if !strings.Contains(stderr, w) {
					t.Errorf("error lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, secret) {
				t.Errorf("error prints the value:\n%s", stderr)
			}
		})
	}
}

// TestConfigFileModes: a config decides whose tokens are accepted and
// what runs, so one that the group or others may write is refused; one
// that others may read is fine (it names secret files, holds none).
func TestConfigFileModes(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "dev = true\n")
	if _, err := parseServe([]string{"--config", path}, io.Discard); err != nil {
		t.Fatalf("mode 0644: %v", err)
	}
	for _, mode := range []os.FileMode{0o664, 0o646} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := parseServe([]string{"--config", path}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "chmod") || !strings.Contains(err.Error(), path) {
			t.Errorf("mode %04o: %v, want a refusal saying how to fix it", mode, err)
		}
	}
	dir := t.TempDir()
	if _, err := parseServe([]string{"--config", dir}, io.Discard); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	if _, err := parseServe([]string{"--config", filepath.Join(dir, "missing.toml")}, io.Discard); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("a missing file: %v", err)
	}
	big := writeConfig(t, "# "+strings.Repeat("x", maxConfigBytes)+"\n")
	if _, err := parseServe([]string{"--config", big}, io.Discard); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over the limit: %v", err)
	}
}

// TestConfigListHandling: an array sets the list, an empty array leaves
// the default, the environment's comma list beats the file's array, and
// each --flag replaces both.
func TestConfigListHandling(t *testing.T) {
	path := writeConfig(t, "dev = true\ncommand = [\"/bin/sh\", \"/usr/bin/env\"]\norigin = []\n")
	o, err := parseServe([]string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.commands, []string{"/bin/sh", "/usr/bin/env"}) || len(o.origins) != 0 {
		t.Errorf("from the file: commands %q, origins %q", o.commands, o.origins)
	}
	t.Setenv("TERMGATE_COMMAND", "/bin/a,/bin/b")
	o, err = parseServe([]string{"--config", path}, io.Discard)
	if err != nil || !reflect.DeepEqual(o.commands, []string{"/bin/a", "/bin/b"}) {
		t.Errorf("env over file: %q, %v", o.commands, err)
	}
	o, err = parseServe([]string{"--config", path, "--command", "/bin/c", "--command", "/bin/d"}, io.Discard)
	if err != nil || !reflect.DeepEqual(o.commands, []string{"/bin/c", "/bin/d"}) {
		t.Errorf("flags over env and file: %q, %v", o.commands, err)
	}
}

// TestPrintConfigRoundTrips: --print-config prints the effective
// configuration as TOML that, read back as a config file, gives the same
// options; defaults are commented out, a URL's password is redacted.
func TestPrintConfigRoundTrips(t *testing.T) {
	t.Parallel()
	args := []string{"serve", "--dev", "--listen", "127.0.0.1:9999", "--memory", "2G", "--pids", "77", "--jwt-leeway", "45s",
		"--command", "/bin/sh", "--command", `/opt/odd "name"\x`, "--query-token", "--origin", "https://user:hunter2@proxy.example"}
	code, out, stderr := runCLI(t, "", append(args, "--print-config")...)
	if code != 0 {
		t.Fatalf("status %d: %s", code, stderr)
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("printed a URL's password:\n%s", out)
	}
	for _, w := range []string{"listen = \"127.0.0.1:9999\"\n", "memory = \"2G\"\n", "pids = 77\n", "jwt-leeway = \"45s\"\n",
		"# tenant-claim = \"tenant\"\n", "query-token = true\n", "# precedence"} {
		if !strings.Contains(strings.ToLower(out), strings.ToLower(w)) {
			t.Errorf("printed config lacks %q:\n%s", w, out)
		}
	}
	path := writeConfig(t, strings.ReplaceAll(out, "xxxxx@", "hunter2@"))
	back, err := parseServe([]string{"--config", path}, io.Discard)
	if err != nil {
		t.Fatalf("read back: %v\n%s", err, out)
	}
	want, err := parseServe(args[1:], io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	back.config, back.flags, want.flags = "", nil, nil
	if !reflect.DeepEqual(back, want) {
		t.Errorf("read back differs:\n got %+v\nwant %+v", back, want)
	}
}

// TestServeTrustedProxies: --trusted-proxy takes addresses and prefixes,
// from the file as an array too, and refuses what is neither, or /0.
func TestServeTrustedProxies(t *testing.T) {
	t.Parallel()
	o, err := parseServe([]string{"--dev", "--trusted-proxy", "127.0.0.1", "--trusted-proxy", "10.0.0.0/8"}, io.Discard)
	if err != nil || len(o.server.TrustedProxies) != 2 || o.server.TrustedProxies[0].String() != "127.0.0.1/32" {
		t.Fatalf("%v, %v", o.server.TrustedProxies, err)
	}
	path := writeConfig(t, "dev = true\ntrusted-proxy = [\"fd00::/8\"]\n")
	if o, err = parseServe([]string{"--config", path}, io.Discard); err != nil || len(o.server.TrustedProxies) != 1 {
		t.Fatalf("from the file: %v, %v", o.server.TrustedProxies, err)
	}
	for _, bad := range []string{"proxy.example", "0.0.0.0/0"} {
		code, _, stderr := runCLI(t, "", "serve", "--dev", "--trusted-proxy", bad)
		if code != 2 || !strings.Contains(stderr, "--trusted-proxy") {
			t.Errorf("%q: status %d, %s", bad, code, stderr)
		}
	}
}

// TestServeHelpNamesTheConfigFile: serve's help says how to give a
// config file and what beats what.
func TestServeHelpNamesTheConfigFile(t *testing.T) {
	t.Parallel()
	code, out, _ := runCLI(t, "", "serve", "--help")
	for _, w := range []string{"--config", "TERMGATE_CONFIG", "beats the file", "--print-config", "--trusted-proxy"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("serve --help (status %d) lacks %q", code, w)
		}
	}
}

// FuzzConfigFile: any document parses or is refused with an error naming
// the file, and every key a flag takes is checked without a panic.
func FuzzConfigFile(f *testing.F) {
	for _, s := range []string{"listen = \"a\"\n", "memory.x = 1\n[t]\na = 2\n", "command = [\"a\", 1]\n", "a = 1\na = 2\n", "[[x]]\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		c, err := parseConfig("f.toml", []byte(doc))
		if err != nil {
			if !strings.Contains(err.Error(), "f.toml") {
				t.Fatalf("%q: error %q does not name the file", doc, err)
			}
			return
		}
		for k := range c.values {
			c.scalar(k, tomlString|tomlInteger)
			c.list(k)
		}
		if err := c.unknown(func(string) bool { return false }); err != nil && !strings.Contains(err.Error(), "f.toml") {
			t.Fatalf("%q: error %q does not name the file", doc, err)
		}
	})
}
