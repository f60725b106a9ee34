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
// (web/client/src) keeps its code lists in step with Codes, Fatal and
// InputRefused (a test here reads them).
//
// Control messages are JSON text frames. DecodeRequest ignores unknown
// fields, so a newer client's optional fields reach an older server
// harmlessly, and answers a message it parsed but refuses (a missing or
// over-long field, an unknown type) with a *RequestError carrying the code
// the server answers with; the connection stays open. Only what it cannot
// parse (not one JSON object) wraps ErrProtocol, as does every error of
// the binary frames, which start with a kind byte: FrameInput
// (AppendInput, DecodeInput) from a client, FrameOutput
// (AppendOutputHeader, DecodeOutput) from the server. The server answers
// ErrProtocol with close code CloseProtocolError.
//
// Strings in the protocol may hold any text, terminal controls included.
// EscapeC1 makes JSON text of them safe to show on a terminal (DEL and the
// C1 controls as \u00XX escapes); the server's logs and audit trail and the
// command line's logs write through it.
package wire
