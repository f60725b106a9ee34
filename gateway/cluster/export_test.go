package cluster

// Names the external tests compare with session's grammar.
var (
	ValidNodeName = validNodeName
	ValidEpoch    = epochPattern.MatchString
	NewEpoch      = newEpoch
)
