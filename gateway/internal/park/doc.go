// Package park lets an idle WebSocket connection give its goroutine up:
// a Spot hands the socket's descriptor to the process's waiter for idle
// descriptors (fdio.WhenReadable), which runs the connection again once
// the client sends something or hangs up, and takes it back before the
// socket is closed. A FrameCursor follows the client's frames through the
// bytes the socket hands the WebSocket's reader, to tell whether that
// reader waits for a new message.
//
// The one assumption about coder/websocket's reader: between messages it
// waits for the first byte of a frame header, and a read of the socket
// that fails there (before any byte of the next frame, outside a
// fragmented message) leaves the reader as it was, so the same
// websocket.Conn reads on once the connection is resumed. The gateway's
// socket (nbConn) relies on it twice: its read loop waits for the
// client's bytes outside the WebSocket (awaitInput) and parks only when
// none came, and a Read that the idle deadline ends after whole control
// frames only (a ping's pong, FrameCursor.AtRest) fails with the
// gateway's errIdle rather than as a timeout. The tests that pin it:
// TestFrameCursorFindsWhereMessagesEnd here, and in the gateway
// TestNBConnReportsIdleOnlyToTheReadLoop, TestNBConnParksWhenIdle,
// TestNBConnReadsAMessageAcrossItsIdleDeadline,
// TestIdleConnectionParksAgainAfterPings and TestParkedConnectionEnds.
// A coder/websocket upgrade that changes how its reader fails makes them
// fail.
package park
