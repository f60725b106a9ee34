package session

import (
	"context"
)

// What the gateway's audit trail needs from the supervisor: a hook on
// every execution's end, an ID for a start that names none, and whether
// an ID it refused as unknown is another owner's.

// Ended is what OnEnd reports of an execution that just ended.
type Ended struct {
	Info Info // with its Result
	// Attrs are the key and value pairs given to WithLogAttrs when it
	// was started (who started it and from where); nil after a restore.
	Attrs []any
}

// OnEnd has f called once for every execution that ends from now on, on
// the goroutine that finishes it, after its result is final: f must not
// block. A later call replaces f; nil removes it.
func (s *Supervisor) OnEnd(f func(Ended)) {
	if f == nil {
		s.onEnd.Store(nil)
		return
	}
	s.onEnd.Store(&f)
}

// ended calls the OnEnd hook, if any, for e.
func (e *execution) ended() {
	if f := e.s.onEnd.Load(); f != nil {
		(*f)(Ended{Info: e.info(), Attrs: e.startAttrs})
	}
}

// HeldByOther reports whether an owner other than owner holds an
// execution id. It is for the audit trail only: a client asking for
// another owner's ID must keep getting ErrNotFound, exactly as for an
// unknown one.
func (s *Supervisor) HeldByOther(owner, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.execs {
		if k.id == id && k.owner != owner {
			return true
		}
	}
	return false
}

// startAttrsOf is the WithLogAttrs attributes of ctx, for Ended.Attrs.
func startAttrsOf(ctx context.Context) []any { return logAttrs(ctx) }
