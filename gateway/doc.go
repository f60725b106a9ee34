// Package gateway will serve executions to browser terminals, IDE
// extensions and tools over an authenticated WebSocket protocol.
package gateway
