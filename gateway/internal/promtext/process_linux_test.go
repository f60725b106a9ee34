package promtext

import "testing"

// TestOpenFDsBothWays: the count from /proc/self/fd's size (Linux 6.2 and
// later) and from listing it (before) agree.
func TestOpenFDsBothWays(t *testing.T) {
	listed, err := listFDs()
	if err != nil {
		t.Fatal(err)
	}
	counted, err := openFDs()
	if err != nil || counted != listed {
		t.Errorf("open descriptors: %d (%v) by openFDs, %d listed", counted, err, listed)
	}
}
