package gateway

import (
	"slices"
	"testing"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session/sessiontest"
)

// TestClusterHello: each node of a cluster names itself in its hello and
// lists the nodes feature; a single node does neither.
func TestClusterHello(t *testing.T) {
	t.Parallel()
	envs := newFakeCluster(t, 2, nil)
	for i, e := range envs {
		c := e.dial(t, e.token(t, "acme", auth.ScopeAttach))
		h, _ := c.expect(t, wire.MsgHello)
		c.close()
		if h.Node != clusterNodeName(i) || !slices.Contains(h.Features, wire.FeatureNodes) {
			t.Errorf("node %d: hello node %q features %v", i, h.Node, h.Features)
		}
	}
	single := newFakeEnv(t, &sessiontest.Launcher{}, nil)
	c := single.dial(t, single.token(t, "acme", auth.ScopeAttach))
	defer c.close()
	if h, _ := c.expect(t, wire.MsgHello); h.Node != "" || slices.Contains(h.Features, wire.FeatureNodes) {
		t.Errorf("single node: hello node %q features %v", h.Node, h.Features)
	}
}
