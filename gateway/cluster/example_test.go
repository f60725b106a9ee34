package cluster_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/termgate/termgate/gateway/cluster"
)

// A front node forwards a request to the owner with a signed hop; the
// owner verifies it and serves the request locally.
func Example() {
	secret := bytes.Repeat([]byte{7}, 32) // in serve: --node-secret-file
	owner, _ := cluster.NewSigner("termgate-1", secret)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hop, err := owner.Verify(r)
		if err != nil {
			http.Error(w, "bad hop", http.StatusUnauthorized)
			return
		}
		fmt.Println("hop from", hop.From, "op", hop.Op, "for", hop.Addr)
	}))
	defer srv.Close()

	members, _ := cluster.NewStatic("termgate-0", map[string]string{"termgate-1": srv.URL})
	front, _ := cluster.NewSigner(members.Self(), secret)
	base, _ := members.URL("termgate-1")
	req, _ := http.NewRequest("GET", base.String()+"/v1/executions/termgate-1.q7bazk~build-42", nil)
	front.SignRequest(req, "termgate-1", cluster.OpLocal, "203.0.113.9:5123")
	tr := cluster.NewTransport(time.Second)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: cluster.WithHeaderTimeout(tr, 2*time.Second)}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	fmt.Println(cluster.Rank("acme", "build-42", members.Members()))
	// Output:
	// hop from termgate-0 op local for 203.0.113.9:5123
	// 200
	// [termgate-1 termgate-0]
}
