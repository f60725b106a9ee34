package gateway

import (
	"runtime/debug"
	"slices"
	"sync"

	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/replay"
)

// features are what this server supports, as its hello lists them.
var features = []string{wire.FeatureAck, wire.FeatureInputAck, wire.FeatureSeen, wire.FeatureFlow, wire.FeatureSnapshot, wire.FeatureForward, wire.FeatureExec}

// hello is the first message on every connection: what the server is,
// what it supports and its limits, so a client adapts without guessing.
// One node of several names itself and lists FeatureNodes.
func (s *Server) hello() wire.Message {
	b := s.bounds()
	f := slices.Clone(features)
	if s.cfg.Supervisor.Config().RecordingsDir != "" {
		f = append(f, wire.FeatureRecord)
	}
	if s.cfg.Egress != nil {
		f = append(f, wire.FeatureNetwork)
	}
	m := wire.Message{
		Type: wire.MsgHello, Server: "termgate " + version(), Protocol: wire.ProtocolVersion,
		Features: f, Limits: &b,
	}
	if s.route != nil {
		m.Node, m.Features = s.route.self(), append(m.Features, wire.FeatureNodes)
	}
	return m
}

// bounds are the limits a hello states, from the server's and the
// supervisor's configuration after their defaults.
func (s *Server) bounds() wire.Bounds {
	cfg, sup := s.cfg, s.cfg.Supervisor.Config()
	return wire.Bounds{
		MaxMessageBytes:      int(cfg.MaxMessageBytes),
		MaxChannels:          cfg.MaxChannels,
		RingBytes:            positiveOr(cfg.Ring.MaxBytes, replay.DefaultMaxBytes),
		RingEvents:           positiveOr(cfg.Ring.MaxEvents, replay.DefaultMaxEvents),
		HoldMS:               cfg.Hold.Milliseconds(),
		InputBufferBytes:     sup.InputBuffer,
		InputFrameBytes:      wire.MaxInputFrameBytes,
		InputPerSecond:       cfg.InputPerSecond,
		ResizesPerSecond:     cfg.ResizesPerSecond,
		PingIntervalMS:       cfg.PingInterval.Milliseconds(),
		PongTimeoutMS:        cfg.PongTimeout.Milliseconds(),
		WriteTimeoutMS:       cfg.WriteTimeout.Milliseconds(),
		DefaultTimeoutMS:     positiveOr(cfg.Sandbox.DefaultTimeout, sup.DefaultTimeout).Milliseconds(),
		RetentionMS:          sup.DefaultRetention.Milliseconds(),
		InteractiveTimeoutMS: positiveOr(cfg.Sandbox.InteractiveTimeout, sup.DefaultInteractiveTimeout).Milliseconds(),
		IdleTimeoutMS:        positiveOr(cfg.Sandbox.IdleTimeout, sup.DefaultIdleTimeout).Milliseconds(),
		Scrollback:           sup.Scrollback,
		ForwardWindow:        ForwardWindow,
		MaxStreams:           MaxStreams,
	}
}

func positiveOr[T ~int | ~int64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// version is the module version the binary was built as, as
// `termgate --version` reports it.
var version = sync.OnceValue(func() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
})
