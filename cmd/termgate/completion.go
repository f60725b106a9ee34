package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// runCompletion prints the completion script for a shell. The scripts are
// generated from commands() and each command's flag set, so a new command
// or flag is completed without anyone editing a list.
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
}

// completionFlags lists the flags of fs.
func completionFlags(fs *flag.FlagSet) []completionFlag {
	var out []completionFlag
	fs.VisitAll(func(f *flag.Flag) {
		_, usage := flag.UnquoteUsage(f)
		b, isBool := f.Value.(interface{ IsBoolFlag() bool })
		out = append(out, completionFlag{f.Name, usage, !(isBool && b.IsBoolFlag())})
	})
	return out
}

func commandNames() string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return strings.Join(names, " ")
}

// writeBash writes a bash completion function: command names first, then
// the command's flags when the word starts with a dash, files otherwise.
func writeBash(w io.Writer) {
	fmt.Fprintf(w, "# bash completion for termgate: source <(termgate completion bash)\n_termgate() {\n")
	fmt.Fprintf(w, "  local cur=${COMP_WORDS[COMP_CWORD]} flags=\n")
	fmt.Fprintf(w, "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n    COMPREPLY=($(compgen -W '%s --help --version' -- \"$cur\"))\n    return\n  fi\n", commandNames())
	fmt.Fprintf(w, "  case ${COMP_WORDS[1]} in\n")
	for _, c := range commands() {
		var names []string
		for _, f := range completionFlags(c.flags()) {
			names = append(names, "--"+f.name)
		}
		if c.name == "completion" {
			names = append(names, "bash", "zsh", "fish")
		}
		if c.name == "help" {
			names = append(names, commandNames())
		}
		fmt.Fprintf(w, "    %s) flags='%s --help' ;;\n", c.name, strings.Join(names, " "))
	}
	fmt.Fprintf(w, "  esac\n")
	fmt.Fprintf(w, "  case ${COMP_WORDS[1]}:$cur in\n    completion:*|help:*|*:-*) COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\")) ;;\n  esac\n}\n")
	fmt.Fprintf(w, "complete -o default -F _termgate termgate\n")
}

// writeZsh writes a zsh completion function with descriptions, for fpath
// (#compdef) or for sourcing.
func writeZsh(w io.Writer) {
	fmt.Fprintf(w, "#compdef termgate\n# zsh completion for termgate: termgate completion zsh > \"${fpath[1]}/_termgate\"\n")
	fmt.Fprintf(w, "_termgate() {\n  local -a commands\n  commands=(\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "    %s\n", shellQuote(c.name+":"+strings.ReplaceAll(c.summary, ":", `\:`)))
	}
	fmt.Fprintf(w, "  )\n  if (( CURRENT == 2 )); then\n    _describe -t commands 'termgate command' commands\n    return\n  fi\n")
	fmt.Fprintf(w, "  local cmd=$words[2]\n  shift words\n  (( CURRENT-- ))\n  case $cmd in\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "    %s)\n      _arguments -s \\\n", c.name)
		for _, f := range completionFlags(c.flags()) {
			spec := "--" + f.name + "[" + zshEscape(f.usage) + "]"
			if f.takesValue {
				spec += ":" + f.name + ":"
			}
			fmt.Fprintf(w, "        %s \\\n", shellQuote(spec))
		}
		rest := "'*:file:_files'"
		switch c.name {
		case "completion":
			rest = "'1:shell:(bash zsh fish)'"
		case "help":
			rest = "'1:command:(" + commandNames() + ")'"
		}
		fmt.Fprintf(w, "        '--help[show help]' %s\n      ;;\n", rest)
	}
	fmt.Fprintf(w, "  esac\n}\n")
	fmt.Fprintf(w, "if [ \"$funcstack[1]\" = _termgate ]; then\n  _termgate \"$@\"\nelse\n  compdef _termgate termgate\nfi\n")
}

// writeFish writes fish completions with descriptions.
func writeFish(w io.Writer) {
	fmt.Fprintf(w, "# fish completion for termgate: termgate completion fish > ~/.config/fish/completions/termgate.fish\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "complete -c termgate -f -n __fish_use_subcommand -a %s -d %s\n", c.name, shellQuote(c.summary))
	}
	for _, c := range commands() {
		cond := shellQuote("__fish_seen_subcommand_from " + c.name)
		for _, f := range completionFlags(c.flags()) {
			arg := ""
			if f.takesValue {
				arg = " -r"
			}
			fmt.Fprintf(w, "complete -c termgate -n %s -l %s%s -d %s\n", cond, f.name, arg, shellQuote(f.usage))
		}
		switch c.name {
		case "completion":
			fmt.Fprintf(w, "complete -c termgate -f -n %s -a 'bash zsh fish'\n", cond)
		case "help":
			fmt.Fprintf(w, "complete -c termgate -f -n %s -a %s\n", cond, shellQuote(commandNames()))
		}
	}
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
