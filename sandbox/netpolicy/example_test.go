package netpolicy_test

import (
	"fmt"
	"net/netip"

	"github.com/termgate/termgate/sandbox/netpolicy"
)

func ExamplePolicy_CheckAddr() {
	p, err := netpolicy.Parse("agents", []byte(`
allow = ["api.example.com:443", "*.example.org:443", "10.1.2.0/24:5432", "db.example.net:5432"]
deny  = ["ads.example.org"]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.CheckName("tcp", "ads.example.org", 443))
	fmt.Println(p.CheckAddr("tcp", "api.example.com", netip.MustParseAddr("169.254.169.254"), 443, nil))
	fmt.Println(p.CheckAddr("tcp", "db.example.net", netip.MustParseAddr("10.1.2.7"), 5432, nil).Allowed)
	// Output:
	// ads.example.org:443 is denied by rule "ads.example.org" of policy "agents"
	// api.example.com:443 resolved to 169.254.169.254, a link-local address (169.254.0.0/16, cloud metadata services), which policy "agents" does not open
	// true
}
