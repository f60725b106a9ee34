package cluster_test

import (
	"strings"
	"testing"

	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/session"
)

// FuzzNodeGrammar keeps this package's copy of the node and epoch grammar
// equal to session's, which owns it.
func FuzzNodeGrammar(f *testing.F) {
	for _, s := range []string{"termgate-0", "a", "-a", "a-", "A", strings.Repeat("z", 63), strings.Repeat("z", 64), "abcdef", "abcde1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := cluster.ValidNodeName(s), session.ValidNodeName(s); got != want {
			t.Fatalf("cluster says %q is a node name: %v; session: %v", s, got, want)
		}
		if got, want := cluster.ValidEpoch(s), session.ValidEpoch(s); got != want {
			t.Fatalf("cluster says %q is an epoch: %v; session: %v", s, got, want)
		}
	})
}

func TestNewEpochIsSessions(t *testing.T) {
	t.Parallel()
	for range 100 {
		if e := cluster.NewEpoch(); !session.ValidEpoch(e) {
			t.Fatalf("cluster's epoch %q is not session's", e)
		}
	}
}
