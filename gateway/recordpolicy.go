package gateway

import (
	"fmt"
	"slices"
	"strings"
)

// RecordPolicy says which executions the server records, when the
// supervisor has a recordings directory.
type RecordPolicy struct {
	All     bool     // every tenant's executions
	Tenants []string // these tenants' executions
	// Input records the input of every recorded execution, not only of
	// those whose start asks for it (input can hold passwords).
	Input bool
}

// ParseRecordPolicy parses --record: "all", "none" (or empty), or a
// comma-separated list of tenants.
func ParseRecordPolicy(s string) (RecordPolicy, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return RecordPolicy{All: true}, nil
	case "none", "":
		return RecordPolicy{}, nil
	}
	var p RecordPolicy
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			return RecordPolicy{}, fmt.Errorf("record: an empty tenant in %q: give all, none or tenant,tenant", s)
		}
		p.Tenants = append(p.Tenants, t)
	}
	return p, nil
}

// Enabled reports whether the policy records anything by itself.
func (p RecordPolicy) Enabled() bool { return p.All || len(p.Tenants) > 0 }

// covers reports whether the policy records tenant's executions.
func (p RecordPolicy) covers(tenant string) bool { return p.All || slices.Contains(p.Tenants, tenant) }
