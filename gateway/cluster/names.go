package cluster

import "github.com/termgate/termgate/session/execid"

// ValidNodeName reports whether s can name a node (an RFC 1123 label, as
// a StatefulSet pod's name is): execid's NODE, the owner part of an
// execution ID. It builds on every OS, for the clients' and manifests'
// side.
func ValidNodeName(s string) bool { return execid.ValidNode(s) }
