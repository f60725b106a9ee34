package cluster_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/termgate/termgate/gateway/cluster"
)

// TestHealth: a failed node is down for exactly its down time, then up
// again; OK ends it early; other nodes are unaffected.
func TestHealth(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := cluster.NewHealth(0)
		if h.Down("n1") {
			t.Fatal("a node never marked is down")
		}
		h.Fail("n1")
		if !h.Down("n1") || h.Down("n2") {
			t.Fatalf("after Fail(n1): n1 down %v, n2 down %v", h.Down("n1"), h.Down("n2"))
		}
		time.Sleep(cluster.DefaultDownFor - time.Millisecond)
		if !h.Down("n1") {
			t.Fatal("n1 up before its down time passed")
		}
		time.Sleep(time.Millisecond)
		if h.Down("n1") {
			t.Fatal("n1 still down after its down time")
		}
		h.Fail("n1")
		h.Fail("n1") // a second failure restarts the time, it does not stack
		h.OK("n1")
		if h.Down("n1") {
			t.Fatal("n1 down after OK")
		}
	})
}

// TestHealthDownFor: the down time is configurable and a new failure
// restarts it.
func TestHealthDownFor(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := cluster.NewHealth(3 * time.Second)
		h.Fail("n1")
		time.Sleep(2 * time.Second)
		h.Fail("n1")
		time.Sleep(2 * time.Second)
		if !h.Down("n1") {
			t.Fatal("a failure 2s ago did not restart the 3s down time")
		}
		time.Sleep(time.Second)
		if h.Down("n1") {
			t.Fatal("n1 down 3s after its last failure")
		}
	})
}
