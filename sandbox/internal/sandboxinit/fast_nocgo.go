//go:build linux && !cgo

package sandboxinit

// cgoInit says the fast path is built in: without cgo, the Go init is the
// only one.
const cgoInit = false
