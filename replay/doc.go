// Package replay will hold the bounded, sequence-numbered event ring that
// lets a client resume an execution's output where it left off.
package replay
