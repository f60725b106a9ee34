package cluster

// Names the external tests compare with session's grammar.
var (
	ValidEpoch = epochPattern.MatchString
	NewEpoch   = newEpoch
)
