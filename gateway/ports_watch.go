package gateway

import (
	"slices"
	"sync"
	"time"

	"github.com/termgate/termgate/gateway/wire"
)

// Ports watching's bounds.
const (
	// PortsInterval is how often the ports of a watched execution are
	// looked at: a program that starts listening is told within it.
	PortsInterval = time.Second
	// MaxPortWatches bounds the executions whose ports the server
	// watches at once (each look costs a visit to the execution's
	// network, about 0.1 ms); a channel beyond it is answered capacity,
	// and stays attached without ports messages.
	MaxPortWatches = 256
)

// portWatch sends the channels that attached with ports a ports message
// with what their execution listens on (session.Ports), at once and
// whenever it changes: one look every PortsInterval per execution,
// however many channels watch it, on one goroutine that runs while any
// does.
type portWatch struct {
	s *Server

	mu      sync.Mutex
	watched map[watchKey]*watchedPorts
	running bool
	emptied chan struct{} // the loop's: told when the last watcher left
}

type watchKey struct{ tenant, id string }

// watchedPorts are an execution's watchers and what they were told.
type watchedPorts struct {
	chans map[*channel]*conn
	told  []wire.Port // nil until the first look
	fresh []*channel  // added since the last look: told at the next even if unchanged
}

// watch adds ch, of conn c, to its execution's watchers; false when
// the server watches MaxPortWatches executions already.
func (w *portWatch) watch(c *conn, ch *channel, tenant string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := watchKey{tenant, ch.execID}
	wp := w.watched[k]
	if wp == nil {
		if len(w.watched) >= MaxPortWatches {
			return false
		}
		if w.watched == nil {
			w.watched = map[watchKey]*watchedPorts{}
		}
		wp = &watchedPorts{chans: map[*channel]*conn{}}
		w.watched[k] = wp
	}
	wp.chans[ch] = c
	wp.fresh = append(wp.fresh, ch)
	if !w.running {
		w.running, w.emptied = true, make(chan struct{}, 1)
		go w.loop(w.emptied)
	}
	return true
}

// unwatch removes ch (its channel ended).
func (w *portWatch) unwatch(ch *channel, tenant string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := watchKey{tenant, ch.execID}
	if wp := w.watched[k]; wp != nil {
		delete(wp.chans, ch)
		if len(wp.chans) == 0 {
			delete(w.watched, k)
		}
	}
	if len(w.watched) == 0 && w.running {
		signal(w.emptied) // the loop ends now, not at its next look
	}
}

// loop looks at the watched executions' ports now and every
// PortsInterval, until none is watched.
func (w *portWatch) loop(emptied chan struct{}) {
	t := time.NewTicker(PortsInterval)
	defer t.Stop()
	for {
		if !w.look() {
			return
		}
		select {
		case <-t.C:
		case <-emptied:
		}
	}
}

// look tells the watchers of each watched execution whose ports changed,
// and the new ones; false, with running cleared, once none is watched.
func (w *portWatch) look() bool {
	w.mu.Lock()
	if len(w.watched) == 0 {
		w.running = false
		w.mu.Unlock()
		return false
	}
	keys := make([]watchKey, 0, len(w.watched))
	for k := range w.watched {
		keys = append(keys, k)
	}
	w.mu.Unlock()
	for _, k := range keys {
		ports := w.ports(k)
		w.mu.Lock()
		wp := w.watched[k]
		if wp == nil {
			w.mu.Unlock()
			continue
		}
		changed := wp.told == nil || !slices.Equal(wp.told, ports)
		tell := map[*channel]*conn{}
		for ch, c := range wp.chans {
			if changed || slices.Contains(wp.fresh, ch) {
				tell[ch] = c
			}
		}
		wp.told, wp.fresh = ports, nil
		w.mu.Unlock()
		for ch, c := range tell {
			c.send(wire.Message{Type: wire.MsgPorts, Channel: ch.id, Ports: ports})
		}
	}
	return true
}

// ports is what execution k listens on now; empty (not nil) when it has
// no network of its own or ended.
func (w *portWatch) ports(k watchKey) []wire.Port {
	l, err := w.s.cfg.Supervisor.Ports().Listening(k.tenant, k.id)
	out := make([]wire.Port, 0, len(l))
	if err != nil {
		return out
	}
	for _, ap := range l {
		out = append(out, wire.Port{Address: ap.Addr().String(), Port: int(ap.Port())})
	}
	return out
}
