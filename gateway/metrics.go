package gateway

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"errors"
	"maps"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/internal/promtext"
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

// metrics are the counters and gauges the gateway keeps itself;
// MetricsHandler writes them with the supervisor's, the network's and
// the runtime's, read when scraped.
type metrics struct {
	connsOpen         atomic.Int64
	connsClosed       counters                            // by close code
	authFailures      counters                            // by reason
	forwards          counters                            // forward streams asked for, by outcome
	forwardBytesTotal counters                            // their bytes, by direction
	fileBytesTotal    counters                            // the files API's bytes, by direction
	refused           [len(gatewayRefusals)]atomic.Uint64 // the gateway's own limits, by gatewayRefusals
	listener          atomic.Pointer[Listener]            // CountRefusals
}

// newMetrics makes a server's metrics: every auth failure reason is a
// series from the start.
func newMetrics() *metrics {
	m := &metrics{}
	for _, r := range []string{authMissing, authExpired, authSignature, authMalformed, authInvalid, authScope, authTenant} {
		m.authFailures.add(r, 0)
	}
	return m
}

// counters are one counter family's series by their label's value, each
// made when first counted. A series counted again is found without a
// lock (sync.Map): forward and file bytes count every chunk.
type counters struct{ by sync.Map } // label value -> *atomic.Uint64

// add adds n to label's series.
func (c *counters) add(label string, n uint64) {
	v, ok := c.by.Load(label)
	if !ok {
		v, _ = c.by.LoadOrStore(label, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(n)
}

// write writes the family: its series by label value, in order.
func (c *counters) write(w *promtext.Writer, name, help, label string) {
	by := map[string]uint64{}
	c.by.Range(func(k, v any) bool {
		by[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	w.Family(name, help, promtext.Counter)
	for _, k := range slices.Sorted(maps.Keys(by)) {
		w.Sample(name, float64(by[k]), label, k)
	}
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
	mux.HandleFunc("GET /metrics", s.serveMetrics)
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
		m.forwards.add("opened", 1)
	} else {
		m.forwards.add("refused", 1)
	}
}

// forwardBytes counts n bytes of a forward stream, "up" or "down".
func (m *metrics) forwardBytes(direction string, n int) {
	m.forwardBytesTotal.add(direction, uint64(n))
}

// fileBytes counts bytes of the files API.
func (m *metrics) fileBytes(direction string, n int) {
	if n > 0 {
		m.fileBytesTotal.add(direction, uint64(n))
	}
}

// connClosed counts a connection's end by its close code.
func (m *metrics) connClosed(code int) {
	m.connsClosed.add(closeCodeLabel(code), 1)
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
	m.authFailures.add(authReason(token, err), 1)
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

// serveMetrics serves every family in the text format, gzipped when the
// scraper accepts it: the gateway's own, the supervisor's Stats (its lock
// only for as long as Stats and Occupancy copy figures out), the network
// policies', the Go runtime's and the process's. Nothing is counted on
// the hot path for a scrape.
func (s *Server) serveMetrics(rw http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer // whole before it is sent: a scrape is all or nothing
	w := promtext.NewWriter(&body)
	m := s.metrics
	w.One("termgate_connections_open", "WebSocket connections open.", promtext.Gauge, float64(m.connsOpen.Load()))
	m.connsClosed.write(w, "termgate_connections_closed_total", "WebSocket connections closed, by close code (none: no close frame; other: a code termgate does not know).", "code")
	m.authFailures.write(w, "termgate_auth_failures_total", "Tokens refused, by reason.", "reason")
	m.forwards.write(w, "termgate_forward_streams_total", "Forward streams asked for, by outcome (opened or refused).", "outcome")
	m.forwardBytesTotal.write(w, "termgate_forward_bytes_total", "Bytes of forward streams, by direction (up: to the port; down: from it).", "direction")
	m.fileBytesTotal.write(w, "termgate_file_bytes_total", "Bytes of the files API, by direction (in: written to workspaces; out: read from them).", "direction")
	if a := s.cfg.Audit; a != nil {
		w.One("termgate_audit_lost_records_total", "Audit records that could not be written once nothing could be refused any more (ends, channel closes, refusals).", promtext.Counter, float64(a.Lost()))
	}
	s.writeSupervisorMetrics(w)
	s.writeNetworkMetrics(w)
	promtext.WriteGo(w)
	promtext.WriteProcess(w)
	w.Flush() // a bytes.Buffer takes everything
	rw.Header().Set("Content-Type", promtext.ContentType)
	rw.Header().Set("Vary", "Accept-Encoding")
	if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		rw.Write(body.Bytes())
		return
	}
	rw.Header().Set("Content-Encoding", "gzip") // as Prometheus asks: a tenth of the bytes
	gz := gzip.NewWriter(rw)
	gz.Write(body.Bytes())
	gz.Close()
}

// tenantNote says how the tenant label is bounded.
var tenantNote = " (the first " + strconv.Itoa(session.TenantSeries) + " tenants; the rest as " + session.TenantOther + ")."

// writeSupervisorMetrics writes the supervisor's figures and the limits'
// refusals.
func (s *Server) writeSupervisorMetrics(w *promtext.Writer) {
	st := s.cfg.Supervisor.Stats()
	w.One("termgate_executions_running", "Executions running.", promtext.Gauge, float64(st.Running))
	w.One("termgate_executions_started_total", "Executions started.", promtext.Counter, float64(st.StartedTotal))
	w.Family("termgate_executions_ended_total", "Executions ended, by status and reason (the exit event's).", promtext.Counter)
	ended := endedByLabel(st.Ended)
	for _, k := range slices.SortedFunc(maps.Keys(ended), func(a, b session.EndKey) int {
		return cmp.Or(cmp.Compare(a.Status, b.Status), cmp.Compare(a.Reason, b.Reason))
	}) {
		w.Sample("termgate_executions_ended_total", float64(ended[k]), "reason", k.Reason, "status", string(k.Status))
	}
	h := st.StartLatency
	w.Histogram("termgate_sandbox_start_seconds", "Time the launcher took to start a sandbox, for those that started.", session.StartLatencyBuckets, h.Counts, h.Sum.Seconds())
	w.One("termgate_output_bytes_total", "Output bytes programs wrote (terminal, stdout and stderr).", promtext.Counter, float64(st.OutputBytes))
	w.One("termgate_input_bytes_total", "Input bytes programs were given (accepted once, retries not counted).", promtext.Counter, float64(st.InputBytes))
	ring, held := s.cfg.Supervisor.Occupancy()
	w.One("termgate_ring_bytes", "Output bytes held in the executions' rings, summed.", promtext.Gauge, float64(ring))
	w.One("termgate_held_bytes", "Output bytes in the rings that readers have not acknowledged, summed.", promtext.Gauge, float64(held))
	w.One("termgate_flow_waiting", "Output streams waiting now because readers hold unacknowledged output.", promtext.Gauge, float64(st.FlowWaiting))
	w.One("termgate_flow_waits_total", "Times an output stream waited because readers held unacknowledged output.", promtext.Counter, float64(st.FlowWaits))
	w.Family("termgate_resumes_total", "Attaches after a sequence the reader had, by what they continued from: history, snapshot or gap.", promtext.Counter)
	for _, k := range session.ResumeKinds {
		w.Sample("termgate_resumes_total", float64(st.Resumes[k]), "kind", k)
	}
	w.One("termgate_resume_gap_bytes_total", "Output bytes skipped by the gaps resumes started with.", promtext.Counter, float64(st.ResumeGapBytes))
	refused := s.refusals(st)
	w.Family("termgate_limit_refusals_total", "Requests and connections refused by a limit, by kind.", promtext.Counter)
	for _, k := range slices.Sorted(maps.Keys(refused)) {
		w.Sample("termgate_limit_refusals_total", float64(refused[k]), "kind", k)
	}
	if !s.cfg.MetricsTenantLabel {
		return
	}
	tenants := slices.Sorted(maps.Keys(st.ByTenant))
	w.Family("termgate_tenant_executions_running", "Executions running, by tenant"+tenantNote, promtext.Gauge)
	for _, t := range tenants {
		w.Sample("termgate_tenant_executions_running", float64(st.ByTenant[t].Running), "tenant", t)
	}
	w.Family("termgate_tenant_executions_started_total", "Executions started, by tenant"+tenantNote, promtext.Counter)
	for _, t := range tenants {
		w.Sample("termgate_tenant_executions_started_total", float64(st.ByTenant[t].Started), "tenant", t)
	}
}

// endedByLabel is every end of endReasons, and any other under its
// bounded label.
func endedByLabel(ended map[session.EndKey]uint64) map[session.EndKey]uint64 {
	by := make(map[session.EndKey]uint64, len(endReasons))
	for _, k := range endReasons {
		by[k] = 0
	}
	for k, n := range ended {
		by[endLabel(k)] += n
	}
	return by
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
