package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parseSize reads a byte count with an optional binary suffix: 512, 64K,
// 64M, 1G, 2T (also 64MiB, 64MB, 64m; all powers of 1024).
func parseSize(s string) (uint64, error) {
	num := strings.TrimRight(s, "KMGTkmgtiBb")
	suffix := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(s[len(num):], "B"), "i"))
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
	sh, ok := shift[suffix]
	if !ok || num == "" {
		return 0, fmt.Errorf("want a size such as 512, 64K, 64M or 1G, got %q", s)
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a size such as 512, 64K, 64M or 1G, got %q", s)
	}
	if v > math.MaxInt64>>sh {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return v << sh, nil
}
