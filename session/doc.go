// Package session will supervise executions independently of the
// connections that start and watch them.
package session
