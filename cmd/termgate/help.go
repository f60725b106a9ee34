package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// runHelp prints the overview, or one command's help.
func runHelp(args []string, stdout io.Writer) error {
	if err := parseFlags(newFlagSet("help"), args); err != nil {
		return err
	}
	if len(args) == 0 {
		printUsage(stdout)
		return nil
	}
	c, ok := commandNamed(args[0])
	if !ok {
		return usageError{fmt.Errorf("help: unknown command %q", args[0])}
	}
	if len(args) > 1 && c.kinds != nil {
		return kindHelp(c, args[1], stdout)
	}
	printHelp(stdout, c, c.flags())
	return nil
}

// kindHelp prints the help of c's kind (termgate help manifest haproxy):
// what "termgate manifest haproxy --help" prints, from the same flag set.
func kindHelp(c command, kind string, stdout io.Writer) error {
	if _, ok := c.kinds()[kind]; !ok {
		return usageError{fmt.Errorf("help: %s has no kind %q", c.name, kind)}
	}
	var h helpRequest
	if err := c.run(context.Background(), []string{kind, "--help"}, nil, io.Discard, io.Discard); !errors.As(err, &h) {
		return fmt.Errorf("help %s %s: %v", c.name, kind, err)
	}
	printHelp(stdout, c, h.fs)
	return nil
}

// printUsage writes the overview of every command.
func printUsage(w io.Writer) {
	fmt.Fprint(w, "termgate runs commands in bubblewrap sandboxes and serves them to browser\nterminals and tools over WebSocket; it is also the gateway's command-line client.\n\nUsage: termgate COMMAND [flags]\n")
	groups := []struct {
		title string
		keep  func(command) bool
	}{
		{"Server commands (Linux only)", func(c command) bool { return c.linux }},
		{"Client commands (Linux, macOS, Windows)", func(c command) bool {
			return !c.linux && c.name != "completion" && c.name != "version" && c.name != "help"
		}},
		{"Other", func(c command) bool { return c.name == "completion" || c.name == "version" || c.name == "help" }},
	}
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, c := range commands() {
			if g.keep(c) {
				fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
			}
		}
	}
	fmt.Fprint(w, "\nThe client commands take --url and --token, by default from TERMGATE_URL and\nTERMGATE_TOKEN.\n\nRun \"termgate COMMAND --help\" for a command's flags and examples.\n")
}

// printHelp writes a command's usage line, summary, flags and examples.
func printHelp(w io.Writer, c command, fs *flag.FlagSet) {
	if kind, ok := strings.CutPrefix(fs.Name(), "termgate "+c.name+" "); ok && c.kinds != nil {
		if k, ok := c.kinds()[kind]; ok {
			k.linux = c.linux
			c = k
		}
	}
	usage := "termgate " + c.name
	if c.args != "" {
		usage += " " + c.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s%s.\n", usage, strings.ToUpper(c.summary[:1]), c.summary[1:])
	if c.linux {
		fmt.Fprint(w, "Linux only.\n")
	}
	if hasFlags(fs) {
		fmt.Fprint(w, "\nFlags:\n")
		printFlags(w, fs)
	}
	if c.exits != "" {
		fmt.Fprintf(w, "\nExit status:\n%s", c.exits)
	}
	if len(c.examples) > 0 {
		fmt.Fprint(w, "\nExamples:\n")
		for _, e := range c.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// printFlags is flag.PrintDefaults with the double dashes people type.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		usage = strings.ReplaceAll(usage, "\n", "\n    \t")
		line += "\n    \t" + usage
		if !isZeroDefault(f.DefValue) {
			if name == "string" {
				line += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				line += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		fmt.Fprintln(w, line)
	})
}

// isZeroDefault reports a default not worth printing.
func isZeroDefault(v string) bool {
	switch v {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}
