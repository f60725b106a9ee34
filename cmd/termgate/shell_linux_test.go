package main

import (
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/sandbox"
)

// TestServeProcDefaultsToPrivateWhereSafe: serve's default procfs is a
// private one where the probe found the sandbox's pid 1 out of reach, and
// none elsewhere, with a warning that says why ps will not work; asking
// for private where it is unsafe is still refused.
func TestServeProcDefaultsToPrivateWhereSafe(t *testing.T) {
	t.Parallel()
	o, err := parseServe([]string{"--dev"}, io.Discard)
	if err != nil || o.proc != "auto" {
		t.Fatalf("default --proc: %q, %v", o.proc, err)
	}
	with := sandbox.Report{Checks: map[string]bool{"init_out_of_reach": true}}
	without := sandbox.Report{Checks: map[string]bool{}}
	cases := []struct {
		asked       string
		report      sandbox.Report
		want, warns string
		fails       bool
	}{
		{"auto", with, "private", "", false},
		{"auto", without, "none", "ps and top", false},
		{"none", with, "none", "", false},
		{"private", with, "private", "", false},
		{"private", without, "", "", true},
	}
	for _, c := range cases {
		got, warning, err := resolveProc(c.asked, c.report)
		if (err != nil) != c.fails || got != c.want || !strings.Contains(warning, c.warns) || (c.warns == "") != (warning == "") {
			t.Errorf("--proc %s, init out of reach %v: %q, warning %q, err %v", c.asked, c.report.Checks["init_out_of_reach"], got, warning, err)
		}
	}
	if _, err := parseServe([]string{"--dev", "--proc", "self-exe"}, io.Discard); err == nil || !strings.Contains(err.Error(), "auto, none or private") {
		t.Errorf("--proc self-exe: %v", err)
	}
}

// TestServeDefaultShellIsUsable: in serve's default configuration, the
// default shell shows a prompt that says where it is, ps lists its
// processes and none of the host's, and localhost resolves.
func TestServeDefaultShellIsUsable(t *testing.T) {
	t.Parallel()
	g := startGateway(t)
	e, err := g.owner(t).Start(t.Context(), wire.Request{ID: "newcomer", PTY: &wire.Size{Rows: 24, Cols: 200}})
	if err != nil {
		t.Fatal(err)
	}
	e.Write([]byte(`ps -e -o comm= > /tmp/ps; echo "PS=[$(sort /tmp/ps | tr '\n' ,)]"; ` +
		`echo "HOSTS=[$(getent hosts localhost | tr -s ' \t' ' ')]"; cd /tmp` + "\nexit\n"))
	var out strings.Builder
	for {
		ev, err := e.Next(t.Context())
		if err != nil {
			t.Fatalf("shell: %v; output %q", err, out.String())
		}
		out.Write(ev.Data)
		if ev.Kind == "exit" {
			break
		}
	}
	for _, want := range []string{`sandbox@termgate:~\$ `, `PS=\[bash,bwrap,ps,\]`, `HOSTS=\[(127\.0\.0\.1|::1) localhost`, `sandbox@termgate:/tmp\$ `} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("want %s in the shell's output %q", want, out.String())
		}
	}
}
