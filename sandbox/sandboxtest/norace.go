//go:build !race

package sandboxtest

// Race reports whether the test binary was built with -race: a heavy test
// shrinks its workload under it rather than stretch its deadline past use.
const Race = false
