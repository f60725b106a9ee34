//go:build linux

package keeper

// Limits of the protocol. Every message is one SOCK_SEQPACKET packet.
const (
	// Version is the protocol version this package speaks.
	Version = 1
	// MaxMessage bounds a message's bytes (header and JSON body).
	MaxMessage = 256 << 10
	// MaxMeta bounds SpawnRequest.Meta and Annotate's meta.
	MaxMeta = 64 << 10
	// MaxFiles bounds the descriptors riding on one message (Files plus Held).
	MaxFiles = 64
	// MaxArgs bounds the number of Args plus Env entries of a spawn.
	MaxArgs = 4096
	// MaxPaths bounds the Cgroups plus Remove paths of a spawn.
	MaxPaths = 16
	// MaxChildren bounds the children one keeper holds.
	MaxChildren = 4096
)
