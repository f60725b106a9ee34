package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowInput sends POST path/input to addr with token and the body one
// byte every pace, all of it when cut is false and half of it when cut
// is true (the connection then closes), and returns the answer's status
// (0 when none came).
func slowInput(addr, path, token, body string, pace time.Duration, cut bool) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(c, "POST %s/input HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, token, len(body))
	send := body
	if cut {
		send = body[:len(body)/2]
	}
	for i := range len(send) {
		time.Sleep(pace)
		if _, err := io.WriteString(c, send[i:i+1]); err != nil {
			return 0, err
		}
	}
	if cut {
		return 0, nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestClusterSlowClientFailsOnlyItself: a tenant whose input requests to
// n1's IDs, sent through n0, trickle their body (one byte every 200 ms,
// far past the peer timeout) or cut it short must not make n0 mark n1
// down: another tenant's requests through n0 for its execution on n1 are
// all answered by n1 meanwhile, and the slow requests get the owner's
// own answer.
func TestClusterSlowClientFailsOnlyItself(t *testing.T) {
	t.Parallel()
	envs := newFakeCluster(t, 2, nil)
	victim := envs[0].token(t, "acme", allScopes...)
	attacker := envs[0].token(t, "mallory", allScopes...)
	x := startOn(t, envs[1], victim, apiStart{Command: "/bin/sh"})
	epoch := strings.TrimPrefix(strings.SplitN(x.ID, "~", 2)[0], "n1.")
	target := "/v1/executions/n1." + epoch + "~x"
	body := `{"offset":0,"data":"aGk="}` // 26 bytes
	const pace = 200 * time.Millisecond  // 5.2 s a body: 5 peer timeouts
	addr := envs[0].http.Listener.Addr().String()

	var wg sync.WaitGroup
	var mu sync.Mutex
	var slow []string
	for i, cut := range []bool{false, true, false} { // staggered by ~0.7 peer timeouts
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 700 * time.Millisecond)
			status, err := slowInput(addr, target, attacker, body, pace, cut)
			mu.Lock()
			defer mu.Unlock()
			slow = append(slow, fmt.Sprintf("cut=%v: %d %v", cut, status, err))
			if !cut && (err != nil || status != http.StatusNotFound) {
				t.Errorf("a slow input through n0 for n1's ID: %d %v, want n1's 404", status, err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	front := nodeAPI(envs[0])
	polls, refused := 0, 0
	var first string
	for polling := true; polling && polls < 2000; polls++ {
		select {
		case <-done:
			polling = false
		case <-time.After(30 * time.Millisecond):
		}
		status, _, b, err := front.do(t.Context(), "GET", "/v1/executions/"+x.ID, victim, nil)
		if err != nil || status != http.StatusOK {
			refused++
			if first == "" {
				first = fmt.Sprintf("%d %s %v", status, b, err)
			}
		}
	}
	<-done
	t.Logf("slow requests: %v", slow)
	t.Logf("%d of %d of another tenant's requests through n0 failed during the slow requests", refused, polls)
	if refused > 0 {
		t.Errorf("%d of %d of another tenant's requests through n0 failed while n1 was up; first: %s", refused, polls, first)
	}
}
