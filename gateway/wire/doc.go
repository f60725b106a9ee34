// Package wire is termgate's WebSocket protocol v1 (gateway/PROTOCOL.md)
// as Go types and codecs, and nothing else: the control messages in both
// directions (Request from a client, Message from the server), the binary
// input and output frames, the bounds the server enforces on them, and the
// stable error and close codes.
//
// The server (package gateway) and the Go client (package gateway/client)
// meet here. Wire imports only the standard library, so a client builds on
// any operating system without the server's sandbox stack. A change to the
// protocol is a change to this package and to PROTOCOL.md, and the JS client
// (web/src) keeps its code lists in step with Fatal and InputRefused (a test
// here reads them).
//
// Control messages are JSON text frames. DecodeRequest refuses unknown
// fields and types, so a typo fails loudly. Binary frames start with a kind
// byte: FrameInput (AppendInput, DecodeInput) from a client, FrameOutput
// (AppendOutputHeader, DecodeOutput) from the server. Every decoding error
// wraps ErrProtocol; the server answers one with close code
// CloseProtocolError.
package wire
