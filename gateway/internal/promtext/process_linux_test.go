package promtext

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOpenFilesCounts runs alone (not parallel), so the files it opens
// are the only change in the count. Both ways of counting must see them,
// and agree.
func TestOpenFilesCounts(t *testing.T) {
	counts := func() (stat, list int) {
		t.Helper()
		stat, err := OpenFiles()
		if err == nil {
			list, err = listFiles()
		}
		if err != nil {
			t.Fatal(err)
		}
		return stat, list
	}
	before, listedBefore := counts()
	dir := t.TempDir()
	for i := range 20 {
		f, err := os.Create(filepath.Join(dir, string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
	}
	after, listed := counts()
	if after < before+20 || listed < listedBefore+20 {
		t.Fatalf("%d (listed: %d) open before 20 more, %d (%d) after", before, listedBefore, after, listed)
	}
	if after != listed {
		t.Errorf("counted %d open, listed %d", after, listed)
	}
}

// BenchmarkCountOpenFiles counts with as many descriptors open as 1,000
// attached shells hold.
func BenchmarkCountOpenFiles(b *testing.B) {
	for range 4000 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
	}
	for b.Loop() {
		if _, err := OpenFiles(); err != nil {
			b.Fatal(err)
		}
	}
}
