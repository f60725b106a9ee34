package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// Reasons of termgate_auth_failures_total: a bounded set, whatever the
// token says.
const (
	authMissing   = "missing"   // no token offered
	authExpired   = "expired"   // exp (or nbf) is past the leeway
	authSignature = "signature" // signed with no key we hold, or badly
	authMalformed = "malformed" // not a JWT
	authInvalid   = "invalid"   // any other check: claims, size, audience
	authScope     = "scope"     // valid, but without the scopes the request needs
	authTenant    = "tenant"    // valid, but its tenant is not bound to its key or issuer
)

// metrics are a server's counters and gauges, on a registry of its own
// (never Prometheus's global one) that MetricsHandler serves.
type metrics struct {
	reg               *prometheus.Registry
	connsOpen         prometheus.Gauge
	connsClosed       *prometheus.CounterVec
	authFailures      *prometheus.CounterVec
	forwards          *prometheus.CounterVec              // forward streams asked for, by outcome
	forwardBytesTotal *prometheus.CounterVec              // their bytes, by direction
	fileBytesTotal    *prometheus.CounterVec              // the files API's bytes, by direction
	refused           [len(gatewayRefusals)]atomic.Uint64 // the gateway's own limits, by gatewayRefusals
	listener          atomic.Pointer[Listener]            // CountRefusals
}

// newMetrics registers the Go runtime and process collectors, the
// gateway's own metrics and s's figures, read at scrape time.
func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		connsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "termgate_connections_open", Help: "WebSocket connections open.",
		}),
		connsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "termgate_connections_closed_total",
			Help: "WebSocket connections closed, by close code (none: no close frame; other: a code termgate does not know).",
		}, []string{"code"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "termgate_auth_failures_total", Help: "Tokens refused, by reason.",
		}, []string{"reason"}),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "termgate_forward_streams_total", Help: "Forward streams asked for, by outcome (opened or refused).",
		}, []string{"outcome"}),
		forwardBytesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "termgate_forward_bytes_total", Help: "Bytes of forward streams, by direction (up: to the port; down: from it).",
		}, []string{"direction"}),
		fileBytesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "termgate_file_bytes_total", Help: "Bytes of the files API, by direction (in: written to workspaces; out: read from them).",
		}, []string{"direction"}),
	}
	for _, r := range []string{authMissing, authExpired, authSignature, authMalformed, authInvalid, authScope, authTenant} {
		m.authFailures.WithLabelValues(r) // every reason is a series from the start
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.connsOpen, m.connsClosed, m.authFailures, m.forwards, m.forwardBytesTotal, m.fileBytesTotal,
		serverCollector{s, s.cfg.MetricsTenantLabel}, networkCollector{s},
	)
	if a := s.cfg.Audit; a != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "termgate_audit_lost_records_total",
			Help: "Audit records that could not be written once nothing could be refused any more (ends, channel closes, refusals).",
		}, func() float64 { return float64(a.Lost()) }))
	}
	return m
}

// CountRefusals adds l's refused connections, by kind, to the server's
// termgate_limit_refusals_total. Call it once with the listener the
// server is served on.
func (s *Server) CountRefusals(l *Listener) { s.metrics.listener.Store(l) }

// MetricsHandler serves the server's Prometheus metrics on /metrics and
// net/http/pprof on /debug/pprof/. Mount it on a listener of its own,
// never the public one: Handler serves neither.
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// forwardOpened counts a forward stream asked for.
func (m *metrics) forwardOpened(ok bool) {
	if ok {
		m.forwards.WithLabelValues("opened").Inc()
	} else {
		m.forwards.WithLabelValues("refused").Inc()
	}
}

// forwardBytes counts n bytes of a forward stream, "up" or "down".
func (m *metrics) forwardBytes(direction string, n int) {
	m.forwardBytesTotal.WithLabelValues(direction).Add(float64(n))
}

// fileBytes counts bytes of the files API.
func (m *metrics) fileBytes(direction string, n int) {
	if n > 0 {
		m.fileBytesTotal.WithLabelValues(direction).Add(float64(n))
	}
}

// connClosed counts a connection's end by its close code.
func (m *metrics) connClosed(code int) {
	m.connsClosed.WithLabelValues(closeCodeLabel(code)).Inc()
	if code == int(websocket.StatusMessageTooBig) {
		m.refuse(refusedMessageSize) // a message beyond Config.MaxMessageBytes
	}
}

// readCloseCode is the close code of a connection this side did not
// close itself: the client's, 1009 when the WebSocket library closed it
// for a message beyond the read limit, or -1 when none was sent.
func readCloseCode(err error) int {
	if errors.Is(err, websocket.ErrMessageTooBig) {
		return int(websocket.StatusMessageTooBig)
	}
	return int(websocket.CloseStatus(err))
}

// closeCodeLabel bounds the label: a client may send any code from 1000
// to 4999.
func closeCodeLabel(code int) string {
	switch {
	case code < 0:
		return "none"
	case code >= 1000 && code <= 1015,
		code >= wire.CloseAuthExpired && code <= wire.CloseHeartbeatTimeout:
		return strconv.Itoa(code)
	}
	return "other"
}

// authFailed counts a refused token; err is Authenticator.Verify's, or
// nil when none was offered.
func (m *metrics) authFailed(token string, err error) {
	m.authFailures.WithLabelValues(authReason(token, err)).Inc()
}

// authReason classifies a refusal into the bounded set above.
func authReason(token string, err error) string {
	switch {
	case token == "":
		return authMissing
	case errors.Is(err, jwt.ErrTokenExpired), errors.Is(err, jwt.ErrTokenNotValidYet):
		return authExpired
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return authSignature
	case errors.Is(err, jwt.ErrTokenMalformed):
		return authMalformed
	case errors.Is(err, auth.ErrTenantNotBound):
		return authTenant
	}
	return authInvalid
}

// Kinds of termgate_limit_refusals_total the gateway counts itself;
// the rate limits, the listener and the supervisor add theirs.
const (
	refusedStartRate    = "start_rate"          // Config.StartsPerMinute
	refusedInputRate    = "input_rate"          // Config.InputPerSecond
	refusedResizeRate   = "resize_rate"         // Config.ResizesPerSecond (resizes and signals)
	refusedSubjectConns = "subject_connections" // Config.MaxConnsPerSubject
	refusedChannels     = "channels"            // Config.MaxChannels
	refusedMessageSize  = "message_size"        // Config.MaxMessageBytes
	refusedSnapshot     = "snapshot"            // Config.MaxMessageBytes, MaxQueuedBytes, MaxQueuedBytesPerSubject
	refusedFileOps      = "file_operations"     // maxFileOps
	refusedConns        = "connections"         // ListenerConfig.MaxConns
	refusedAddrConns    = "addr_connections"    // ListenerConfig.MaxConnsPerAddr
	refusedFDHeadroom   = "fd_headroom"         // ListenerConfig.FDHeadroom
	refusedPreAuth      = "preauth_connections" // ListenerConfig.MaxPreAuthConns: refused
	evictedPreAuth      = "preauth_evicted"     // ListenerConfig.MaxPreAuthConns: closed for a newer one
	firstByteTimeout    = "first_byte_timeout"  // ListenerConfig.FirstByteTimeout
)

// gatewayRefusals are the kinds metrics.refused counts, in its order.
var gatewayRefusals = [...]string{refusedSubjectConns, refusedChannels, refusedMessageSize, refusedSnapshot, refusedFileOps}

// refuse counts a refusal of one of gatewayRefusals.
func (m *metrics) refuse(kind string) {
	m.refused[slices.Index(gatewayRefusals[:], kind)].Add(1)
}

// endReasons are the ends each a series from the start: the final
// statuses with the exit event's reasons (session.EndKey).
var endReasons = []session.EndKey{
	{Status: session.StatusExited, Reason: "exited"},
	{Status: session.StatusFailed, Reason: "failed"}, {Status: session.StatusFailed, Reason: "lost"},
	{Status: session.StatusCancelled, Reason: "cancelled"},
	{Status: session.StatusTimedOut, Reason: "timed_out"}, {Status: session.StatusTimedOut, Reason: "timed_out:idle"},
	{Status: session.StatusLimit, Reason: "limit:memory"}, {Status: session.StatusLimit, Reason: "limit:pids"},
	{Status: session.StatusLimit, Reason: "limit:cpu"}, {Status: session.StatusLimit, Reason: "limit:file-size"},
}

// endLabel bounds an end's labels to endReasons; another (a reason added
// later) shows its status with reason "other".
func endLabel(k session.EndKey) session.EndKey {
	if slices.Contains(endReasons, k) {
		return k
	}
	return session.EndKey{Status: k.Status, Reason: "other"}
}

// serverCollector reads the supervisor's Stats and the gateway's limits
// when scraped: no cost on the hot path, and the supervisor's lock only
// for as long as Stats and Occupancy copy figures out.
type serverCollector struct {
	s         *Server
	perTenant bool // Config.MetricsTenantLabel
}

// tenantNote says how the tenant label is bounded.
var tenantNote = fmt.Sprintf(" (the first %d tenants; the rest as %s).", session.TenantSeries, session.TenantOther)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descRunning      = desc("termgate_executions_running", "Executions running.")
	descStarted      = desc("termgate_executions_started_total", "Executions started.")
	descEnded        = desc("termgate_executions_ended_total", "Executions ended, by status and reason (the exit event's).", "status", "reason")
	descStartLatency = desc("termgate_sandbox_start_seconds", "Time the launcher took to start a sandbox, for those that started.")
	descOutput       = desc("termgate_output_bytes_total", "Output bytes programs wrote (terminal, stdout and stderr).")
	descInput        = desc("termgate_input_bytes_total", "Input bytes programs were given (accepted once, retries not counted).")
	descRing         = desc("termgate_ring_bytes", "Output bytes held in the executions' rings, summed.")
	descHeld         = desc("termgate_held_bytes", "Output bytes in the rings that readers have not acknowledged, summed.")
	descFlowWaiting  = desc("termgate_flow_waiting", "Output streams waiting now because readers hold unacknowledged output.")
	descFlowWaits    = desc("termgate_flow_waits_total", "Times an output stream waited because readers held unacknowledged output.")
	descResumes      = desc("termgate_resumes_total", "Attaches after a sequence the reader had, by what they continued from: history, snapshot or gap.", "kind")
	descGapBytes     = desc("termgate_resume_gap_bytes_total", "Output bytes skipped by the gaps resumes started with.")
	descRefusals     = desc("termgate_limit_refusals_total", "Requests and connections refused by a limit, by kind.", "kind")
	descTenantRun    = desc("termgate_tenant_executions_running", "Executions running, by tenant"+tenantNote, "tenant")
	descTenantStart  = desc("termgate_tenant_executions_started_total", "Executions started, by tenant"+tenantNote, "tenant")
)

// Describe implements prometheus.Collector.
func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descStarted, descEnded, descStartLatency, descOutput, descInput,
		descRing, descHeld, descFlowWaiting, descFlowWaits, descResumes, descGapBytes, descRefusals} {
		ch <- d
	}
	if c.perTenant {
		ch <- descTenantRun
		ch <- descTenantStart
	}
}

// Collect implements prometheus.Collector.
func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.cfg.Supervisor.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(descRunning, float64(st.Running))
	counter(descStarted, st.StartedTotal)
	collectEnded(counter, st.Ended)
	ch <- startLatency(st.StartLatency)
	counter(descOutput, st.OutputBytes)
	counter(descInput, st.InputBytes)
	ring, held := c.s.cfg.Supervisor.Occupancy()
	gauge(descRing, float64(ring))
	gauge(descHeld, float64(held))
	gauge(descFlowWaiting, float64(st.FlowWaiting))
	counter(descFlowWaits, st.FlowWaits)
	for _, k := range session.ResumeKinds {
		counter(descResumes, st.Resumes[k], k)
	}
	counter(descGapBytes, st.ResumeGapBytes)
	for k, n := range c.s.refusals(st) {
		counter(descRefusals, n, k)
	}
	if c.perTenant {
		for t, ts := range st.ByTenant {
			gauge(descTenantRun, float64(ts.Running), t)
			counter(descTenantStart, ts.Started, t)
		}
	}
}

// collectEnded emits every end of endReasons, and any other under its
// bounded label.
func collectEnded(counter func(*prometheus.Desc, uint64, ...string), ended map[session.EndKey]uint64) {
	by := make(map[session.EndKey]uint64, len(endReasons))
	for _, k := range endReasons {
		by[k] = 0
	}
	for k, n := range ended {
		by[endLabel(k)] += n
	}
	for k, n := range by {
		counter(descEnded, n, string(k.Status), k.Reason)
	}
}

// startLatency is the sandbox start histogram in Prometheus's form:
// cumulative counts per upper bound, in seconds.
func startLatency(h session.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(session.StartLatencyBuckets))
	var cum uint64
	for i, le := range session.StartLatencyBuckets {
		cum += h.Counts[i]
		buckets[le] = cum
	}
	return prometheus.MustNewConstHistogram(descStartLatency, h.Count(), h.Sum.Seconds(), buckets)
}

// refusals gathers every kind of limit refusal: the supervisor's (in
// st), the rate limits', the gateway's own and the listener's.
func (s *Server) refusals(st session.Stats) map[string]uint64 {
	out := make(map[string]uint64, len(st.Refused)+len(gatewayRefusals)+9)
	for k, n := range st.Refused {
		out[k] = n
	}
	out[refusedStartRate] = s.starts.refused.Load()
	out[refusedInputRate] = s.inputs.refused.Load()
	out[refusedResizeRate] = s.resizes.refused.Load()
	for i, k := range gatewayRefusals {
		out[k] = s.metrics.refused[i].Load()
	}
	var ls ListenerStats
	if l := s.metrics.listener.Load(); l != nil {
		ls = l.Stats()
	}
	out[refusedConns], out[refusedAddrConns], out[refusedFDHeadroom] = ls.RefusedConns, ls.RefusedAddr, ls.RefusedFDs
	out[refusedPreAuth], out[evictedPreAuth], out[firstByteTimeout] = ls.RefusedPreAuth, ls.Evicted, ls.FirstByteTimeouts
	return out
}
