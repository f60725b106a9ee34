package cluster

import "regexp"

// nodePattern is session's NODE grammar (session.ValidNodeName), repeated
// here so this package imports nothing of the server's; a test keeps the
// two equal.
var nodePattern = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)

// epochPattern is session's EPOCH grammar (session.ValidEpoch).
var epochPattern = regexp.MustCompile(`^[a-z2-7]{6}$`)

// ValidNodeName reports whether s can name a node (an RFC 1123 label, as
// a StatefulSet pod's name is). It builds on every OS, for the clients'
// and manifests' side.
func ValidNodeName(s string) bool { return nodePattern.MatchString(s) }
