package cluster

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// Rank orders members for tenant's key by rendezvous hashing, best first:
// by the first 8 bytes of sha256(tenant "\x00" key "\x00" node), highest
// first, ties by name. Every node computes the same order from the same
// members, and removing or adding a node changes only the keys whose
// leading candidates it was or becomes. members is not modified.
func Rank(tenant, key string, members []string) []string {
	type scored struct {
		node  string
		score uint64
	}
	s := make([]scored, len(members))
	for i, node := range members {
		sum := sha256.Sum256([]byte(tenant + "\x00" + key + "\x00" + node))
		s[i] = scored{node, binary.BigEndian.Uint64(sum[:8])}
	}
	slices.SortFunc(s, func(a, b scored) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.node, b.node))
	})
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i].node
	}
	return out
}
