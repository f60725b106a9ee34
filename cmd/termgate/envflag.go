package main

import (
	"flag"
	"os"
)

// envString registers a string flag whose default is the environment
// variable env (flag > env). Help and flag errors say "(from ENV)" and
// never show the value: it may be a secret, and help lands in terminals
// and CI logs.
func envString(fs *flag.FlagSet, p *string, name, env, usage string) {
	*p = os.Getenv(env)
	fs.Var((*hiddenString)(p), name, usage+" (from "+env+")")
}

// hiddenString is a string flag.Value whose String is always empty, so the
// flag package prints no default for it.
type hiddenString string

func (s *hiddenString) Set(v string) error { *s = hiddenString(v); return nil }
func (s *hiddenString) String() string     { return "" }
