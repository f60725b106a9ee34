package main

import "testing"

// TestRemoteArg: :PATH is the workspace, ID:PATH beside an execution,
// and a path with a "/" before its first ":", or none, is local.
func TestRemoteArg(t *testing.T) {
	t.Parallel()
	for arg, want := range map[string][3]string{
		":":            {"", "", "remote"},
		":src/a.txt":   {"src/a.txt", "", "remote"},
		"build-7:out/": {"out/", "build-7", "remote"},
		"id:":          {"", "id", "remote"},
		"./a:b":        {"", "", ""},
		"/tmp/x:y":     {"", "", ""},
		"plain.txt":    {"", "", ""},
	} {
		p, exec, ok := remoteArg(arg)
		if got := [3]string{p, exec, map[bool]string{true: "remote"}[ok]}; got != want {
			t.Errorf("remoteArg(%q) = %q, want %q", arg, got, want)
		}
	}
}
