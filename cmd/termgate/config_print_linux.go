package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// registerConfigFlags adds --config and --print-config, which a config
// file cannot set.
func registerConfigFlags(e *envFlags, o *serveOptions) {
	e.fs.StringVar(&o.config, "config", "", "TOML file of these flags, keys named as them: listen = \"127.0.0.1:8080\", jwt-public-key = [\"a.pem\", \"b.pem\"], memory = \"2G\", dev = true; a flag beats the environment, which beats the file, which beats the default; it may be readable by all, never writable by group or others (env TERMGATE_CONFIG)")
	o.config = os.Getenv("TERMGATE_CONFIG") // after: help never shows it
	e.fs.BoolVar(&o.printConfig, "print-config", false, "print the effective configuration as a config file (defaults commented out, URL passwords redacted) and exit")
}

// printedFlag is one flag as --print-config prints it: value is its
// TOML value and whether that is the built-in default.
type printedFlag struct {
	name, usage string
	value       func() (toml string, isDefault bool)
}

func (e *envFlags) print(name, usage string, value func() (string, bool)) {
	e.printed = append(e.printed, printedFlag{name, usage, value})
}

// printConfig writes the effective configuration as a config file:
// each flag with its usage as a comment, set values as keys and built-in
// defaults commented out, so that it reads back as the same options and
// leaves the defaults to the server.
func (e *envFlags) printConfig(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# termgate serve configuration, printed by termgate serve --print-config.\n" +
		"# Use it with termgate serve --config FILE (or TERMGATE_CONFIG=FILE).\n" +
		"# Precedence: a flag beats its TERMGATE_* environment variable, which beats\n" +
		"# this file, which beats the built-in default. Keys are the flag names.\n")
	for _, f := range e.printed {
		fmt.Fprintf(&b, "\n# %s\n", strings.ReplaceAll(f.usage, "\n", "\n# "))
		v, isDefault := f.value()
		switch {
		case v == "":
			fmt.Fprintf(&b, "# %s =\n", f.name) // the default is in the usage
		case isDefault:
			fmt.Fprintf(&b, "# %s = %s\n", f.name, v)
		default:
			fmt.Fprintf(&b, "%s = %s\n", f.name, v)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tomlQuote is s as a TOML basic string, with a URL's password redacted:
// a config file names secret files, never holds a secret, but a URL may
// carry one.
func tomlQuote(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			s = u.Redacted()
		}
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlArray is list as a TOML array of strings.
func tomlArray(list []string) string {
	quoted := make([]string, len(list))
	for i, s := range list {
		quoted[i] = tomlQuote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// tomlScalar is a parsed flag's text as TOML: a decimal integer bare, any
// other text a string; "" (never set) stays "".
func tomlScalar(text string) string {
	if text == "" {
		return ""
	}
	if _, err := strconv.ParseInt(text, 10, 64); err == nil && !strings.HasPrefix(text, "+") {
		return text
	}
	return tomlQuote(text)
}
