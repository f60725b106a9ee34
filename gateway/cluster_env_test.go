package gateway

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/termgate/termgate/gateway/cluster"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
	"github.com/termgate/termgate/session/execid"
	"github.com/termgate/termgate/session/sessiontest"
)

// clusterHopSecret is the node secret every node of a fake cluster shares.
var clusterHopSecret = []byte("cluster-test-hop-secret-0123456789abcdef")

// Timeouts of a fake cluster's nodes: short, so a test of a silent peer
// ends soon, and far above a loaded machine's round trip to 127.0.0.1.
const (
	clusterDialTimeout = time.Second
	clusterTimeout     = time.Second
	clusterPing        = 500 * time.Millisecond
)

// clusterNodeName is the name of node i of a fake cluster: n0, n1, ...
func clusterNodeName(i int) string { return fmt.Sprintf("n%d", i) }

// clusterScript is the fake program every node runs: it writes the name
// of the node it runs on and waits to be stopped, as a cancelled
// program ends.
func clusterScript(node string) func(p *sessiontest.Proc) sandbox.Exit {
	return func(p *sessiontest.Proc) sandbox.Exit {
		fmt.Fprintf(p.Out().Stdout, "on %s\n", node)
		why := <-p.Stopped()
		return sandbox.Exit{Code: -1, Signal: syscall.SIGTERM, Stopped: why}
	}
}

// newFakeCluster starts n gateways on 127.0.0.1 over fake launchers
// (clusterScript), each one node (n0, n1, ...) of a static cluster of all
// n with a shared hop secret and the same JWT secret, so a token minted by
// any node's env is valid on every node. tweak, when set, adjusts node i's
// config (its Cluster is set) before it starts; it may replace Transport
// or the timeouts. Every node listens before any starts serving, so each
// knows the others' URLs.
func newFakeCluster(t testing.TB, n int, tweak func(i int, c *Config)) []*testEnv {
	t.Helper()
	lns := make([]net.Listener, n)
	peers := map[string]string{}
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		t.Cleanup(func() { ln.Close() }) // a node that failed to start; a second Close is harmless
		peers[clusterNodeName(i)] = "http://" + ln.Addr().String()
	}
	envs := make([]*testEnv, n)
	for i := range n {
		name := clusterNodeName(i)
		members, err := cluster.NewStatic(name, peers)
		if err != nil {
			t.Fatal(err)
		}
		signer, err := cluster.NewSigner(name, clusterHopSecret)
		if err != nil {
			t.Fatal(err)
		}
		l := &sessiontest.Launcher{Script: clusterScript(name)}
		envs[i] = newEnvListener(t, session.Config{Launcher: l}, lns[i], func(c *Config) {
			c.Cluster = &ClusterConfig{
				Owner:   execid.Owner{Node: name, Epoch: execid.NewEpoch()},
				Members: members, Signer: signer,
				DialTimeout: clusterDialTimeout, Timeout: clusterTimeout, PingInterval: clusterPing,
			}
			if tweak != nil {
				tweak(i, c)
			}
		})
		envs[i].fake = l
	}
	return envs
}
