//go:build tools

// Package tools pins the versions of the developer tools termgate's test
// command runs, so the application's go.mod stays free of them.
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"
