package cluster

import (
	"fmt"
	"slices"
	"testing"
)

func TestRankStable(t *testing.T) {
	t.Parallel()
	members := []string{"n0", "n1", "n2"}
	first := Rank("acme", "build-42", members)
	if len(first) != 3 || !slices.Equal(slices.Sorted(slices.Values(first)), members) {
		t.Fatalf("Rank = %q, not a permutation of %q", first, members)
	}
	for range 10 {
		if got := Rank("acme", "build-42", []string{"n2", "n0", "n1"}); !slices.Equal(got, first) {
			t.Fatalf("Rank depends on the members' order: %q vs %q", got, first)
		}
	}
	if !slices.Equal(members, []string{"n0", "n1", "n2"}) {
		t.Fatalf("Rank changed its argument: %q", members)
	}
	// The tenant is part of the hash: the same key ranks differently for some tenants.
	differs := false
	for i := range 50 {
		if !slices.Equal(Rank(fmt.Sprint("t", i), "build-42", members), first) {
			differs = true
		}
	}
	if !differs {
		t.Error("50 tenants rank one key the same way")
	}
	// A fixed vector: the hash must not change between versions, or
	// nodes of two versions disagree during a rolling upgrade.
	if got := Rank("acme", "build-42", members); !slices.Equal(got, rankAcmeBuild42) {
		t.Errorf("Rank(acme, build-42) = %q, want %q", got, rankAcmeBuild42)
	}
	if got := Rank("acme", "k", nil); len(got) != 0 {
		t.Errorf("Rank of no members = %q", got)
	}
}

// rankAcmeBuild42 is Rank("acme", "build-42", n0..n2), computed apart
// (Python hashlib: sha256, first 8 bytes big-endian, highest first).
var rankAcmeBuild42 = []string{"n1", "n2", "n0"}

// TestRankBalanced: 10,000 keys on 3 nodes spread within 5% of a third.
func TestRankBalanced(t *testing.T) {
	t.Parallel()
	members := []string{"termgate-0", "termgate-1", "termgate-2"}
	count := map[string]int{}
	for i := range 10000 {
		count[Rank("acme", fmt.Sprint("key-", i), members)[0]]++
	}
	for _, n := range members {
		if c := count[n]; c < 3333-167 || c > 3333+167 {
			t.Errorf("%s is first for %d of 10,000 keys, want 3333±167: %v", n, c, count)
		}
	}
}

// TestRankMovement: adding a node moves only keys to it (about a quarter
// of them with 4 nodes), and the others keep their order; removing a node
// moves only its own keys.
func TestRankMovement(t *testing.T) {
	t.Parallel()
	three := []string{"n0", "n1", "n2"}
	four := []string{"n0", "n1", "n2", "n3"}
	moved := 0
	for i := range 10000 {
		key := fmt.Sprint("key-", i)
		before, after := Rank("acme", key, three), Rank("acme", key, four)
		if before[0] != after[0] {
			moved++
			if after[0] != "n3" {
				t.Fatalf("%s moved from %s to %s, not to the new node", key, before[0], after[0])
			}
		}
		if got := slices.DeleteFunc(slices.Clone(after), func(n string) bool { return n == "n3" }); !slices.Equal(got, before) {
			t.Fatalf("%s: order without the new node %q, before %q", key, got, before)
		}
	}
	if moved < 2500-200 || moved > 2500+200 {
		t.Errorf("adding a fourth node moved %d of 10,000 keys, want about 2,500", moved)
	}
}
