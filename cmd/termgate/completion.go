package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// shells are the shells termgate completion writes scripts for.
var shells = []string{"bash", "zsh", "fish"}

// runCompletion prints the completion script for a shell. The scripts are
// generated from commands(): each command's flag set, the values its
// flags complete to and its operands, so a new command, flag or value is
// completed without anyone editing a script.
func runCompletion(args []string, stdout io.Writer) error {
	fs := newFlagSet("completion")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("completion: name one shell: bash, zsh or fish")}
	}
	switch fs.Arg(0) {
	case "bash":
		writeBash(stdout)
	case "zsh":
		writeZsh(stdout)
	case "fish":
		writeFish(stdout)
	default:
		return usageError{fmt.Errorf("completion: unknown shell %q: want bash, zsh or fish", fs.Arg(0))}
	}
	return nil
}

// completionFlag is one flag as a completion script needs it.
type completionFlag struct {
	name, usage string
	takesValue  bool
	values      completes // what the value completes to; zero: anything
}

// completionFlags lists c's flags, with what their values complete to.
// A flag the command does not define here (the sandbox commands off
// Linux) has nothing to complete.
func completionFlags(c command) []completionFlag {
	var out []completionFlag
	c.flags().VisitAll(func(f *flag.Flag) {
		_, usage := flag.UnquoteUsage(f)
		b, isBool := f.Value.(interface{ IsBoolFlag() bool })
		out = append(out, completionFlag{f.Name, usage, !(isBool && b.IsBoolFlag()), c.values[f.Name]})
	})
	return out
}

// commandNames lists every command's name, in help's order.
func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}

// operandWords returns the words c completes after its flags, or nil.
func operandWords(c command) []string {
	if c.operands == nil {
		return nil
	}
	return c.operands()
}

// writeBash writes a bash completion function: command names first; then
// a flag's value when the word before names a flag with known values (as
// --flag VALUE or --flag=VALUE, which bash splits at the '='); then the
// command's flags when the word starts with a dash, its operands or files
// otherwise.
func writeBash(w io.Writer) {
	fmt.Fprint(w, "# bash completion for termgate: source <(termgate completion bash)\n_termgate() {\n")
	fmt.Fprint(w, "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} flags= operands=\n")
	fmt.Fprintf(w, "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n    COMPREPLY=($(compgen -W %s -- \"$cur\"))\n    return\n  fi\n",
		shellQuote(strings.Join(commandNames(), " ")+" --help --version"))
	fmt.Fprint(w, "  if [ \"$cur\" = = ]; then\n    cur=\n  elif [ \"$prev\" = = ] && [ \"$COMP_CWORD\" -gt 2 ]; then\n    prev=${COMP_WORDS[COMP_CWORD-2]}\n  fi\n")
	fmt.Fprint(w, "  case ${COMP_WORDS[1]}:$prev in\n")
	for _, c := range commands() {
		for _, f := range completionFlags(c) {
			if action := bashValues(f.values); action != "" {
				fmt.Fprintf(w, "    %s:--%s) %s; return ;;\n", c.name, f.name, action)
			}
		}
	}
	fmt.Fprint(w, "  esac\n  case ${COMP_WORDS[1]} in\n")
	for _, c := range commands() {
		var names []string
		for _, f := range completionFlags(c) {
			names = append(names, "--"+f.name)
		}
		names = append(names, "--help")
		fmt.Fprintf(w, "    %s) flags=%s", c.name, shellQuote(strings.Join(names, " ")))
		if ops := operandWords(c); len(ops) > 0 {
			fmt.Fprintf(w, " operands=%s", shellQuote(strings.Join(ops, " ")))
		}
		fmt.Fprint(w, " ;;\n")
	}
	fmt.Fprint(w, "  esac\n  case $cur in\n    -*) COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\")) ;;\n")
	fmt.Fprint(w, "    *) [ -n \"$operands\" ] && COMPREPLY=($(compgen -W \"$operands\" -- \"$cur\")) ;;\n  esac\n}\n")
	fmt.Fprint(w, "complete -o default -F _termgate termgate\n")
}

// bashValues is the bash that completes a value to v, or "" when any
// value goes. compopt, which fails outside a completion, marks paths so
// directories get their slash.
func bashValues(v completes) string {
	switch {
	case len(v.words) > 0:
		return "COMPREPLY=($(compgen -W " + shellQuote(strings.Join(v.words, " ")) + " -- \"$cur\"))"
	case v.file:
		return "compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\"))"
	case v.dir:
		return "compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- \"$cur\"))"
	}
	return ""
}

// writeZsh writes a zsh completion function with descriptions, for fpath
// (#compdef) or for sourcing.
func writeZsh(w io.Writer) {
	fmt.Fprint(w, "#compdef termgate\n# zsh completion for termgate: termgate completion zsh > \"${fpath[1]}/_termgate\"\n")
	fmt.Fprint(w, "_termgate() {\n  local -a commands\n  commands=(\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "    %s\n", shellQuote(c.name+":"+strings.ReplaceAll(c.summary, ":", `\:`)))
	}
	fmt.Fprint(w, "  )\n  if (( CURRENT == 2 )); then\n    _describe -t commands 'termgate command' commands\n    return\n  fi\n")
	fmt.Fprint(w, "  local cmd=$words[2]\n  shift words\n  (( CURRENT-- ))\n  case $cmd in\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "    %s)\n      _arguments -s \\\n", c.name)
		for _, f := range completionFlags(c) {
			fmt.Fprintf(w, "        %s \\\n", shellQuote(zshFlagSpec(f)))
		}
		rest := "'*:file:_files'"
		if ops := operandWords(c); len(ops) > 0 {
			rest = shellQuote("1:" + c.name + ":(" + strings.Join(ops, " ") + ")")
		}
		fmt.Fprintf(w, "        '--help[show help]' %s\n      ;;\n", rest)
	}
	fmt.Fprint(w, "  esac\n}\n")
	fmt.Fprint(w, "if [ \"$funcstack[1]\" = _termgate ]; then\n  _termgate \"$@\"\nelse\n  compdef _termgate termgate\nfi\n")
}

// zshFlagSpec is f as an _arguments spec. A flag with a value takes it as
// the next word or after '=' (the spec's "--name="), and names what it
// completes to.
func zshFlagSpec(f completionFlag) string {
	spec := "--" + f.name
	if !f.takesValue {
		return spec + "[" + zshEscape(f.usage) + "]"
	}
	spec += "=[" + zshEscape(f.usage) + "]:" + f.name + ":"
	switch {
	case len(f.values.words) > 0:
		spec += "(" + strings.Join(f.values.words, " ") + ")"
	case f.values.file:
		spec += "_files"
	case f.values.dir:
		spec += "_files -/"
	}
	return spec
}

// writeFish writes fish completions with descriptions.
func writeFish(w io.Writer) {
	fmt.Fprint(w, "# fish completion for termgate: termgate completion fish > ~/.config/fish/completions/termgate.fish\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "complete -c termgate -f -n __fish_use_subcommand -a %s -d %s\n", c.name, shellQuote(c.summary))
	}
	for _, c := range commands() {
		cond := shellQuote("__fish_seen_subcommand_from " + c.name)
		for _, f := range completionFlags(c) {
			fmt.Fprintf(w, "complete -c termgate -n %s -l %s%s -d %s\n", cond, f.name, fishValues(f), shellQuote(f.usage))
		}
		fmt.Fprintf(w, "complete -c termgate -n %s -l help -d 'show help'\n", cond)
		if ops := operandWords(c); len(ops) > 0 {
			fmt.Fprintf(w, "complete -c termgate -f -n %s -a %s\n", cond, shellQuote(strings.Join(ops, " ")))
		}
	}
}

// fishValues is the options of a fish complete line for f's value: -x
// (a value, no files) with the words or directories it completes to, -r
// -F for a file, -r for anything.
func fishValues(f completionFlag) string {
	switch {
	case !f.takesValue:
		return ""
	case len(f.values.words) > 0:
		return " -x -a " + shellQuote(strings.Join(f.values.words, " "))
	case f.values.file:
		return " -r -F"
	case f.values.dir:
		return " -x -a '(__fish_complete_directories (commandline -ct))'"
	}
	return " -r"
}

// shellQuote quotes s in single quotes for sh, zsh and fish.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// zshEscape makes s safe inside an _arguments description or a _describe
// item: brackets and colons have meanings there.
func zshEscape(s string) string {
	return strings.NewReplacer("[", `\[`, "]", `\]`, ":", `\:`, "\n", " ").Replace(s)
}
