package gateway

import (
	"errors"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"

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
	reg          *prometheus.Registry
	connsOpen    prometheus.Gauge
	connsClosed  *prometheus.CounterVec
	authFailures *prometheus.CounterVec
}

// newMetrics registers the Go runtime and process collectors, the
// gateway's own metrics and the executions of sup, read at scrape time.
func newMetrics(sup *session.Supervisor) *metrics {
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
	}
	for _, r := range []string{authMissing, authExpired, authSignature, authMalformed, authInvalid, authScope, authTenant} {
		m.authFailures.WithLabelValues(r) // every reason is a series from the start
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.connsOpen, m.connsClosed, m.authFailures,
		executionsCollector{sup},
	)
	return m
}

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

// connClosed counts a connection's end by its close code.
func (m *metrics) connClosed(code int) {
	m.connsClosed.WithLabelValues(closeCodeLabel(code)).Inc()
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

// endedStatuses are the final statuses, each a series from the start.
var endedStatuses = []session.Status{
	session.StatusExited, session.StatusFailed, session.StatusCancelled,
	session.StatusTimedOut, session.StatusLimit,
}

// executionsCollector reads the supervisor's Stats when scraped: no cost
// on the hot path.
type executionsCollector struct{ sup *session.Supervisor }

var (
	descRunning = prometheus.NewDesc("termgate_executions_running", "Executions running.", nil, nil)
	descStarted = prometheus.NewDesc("termgate_executions_started_total", "Executions started.", nil, nil)
	descEnded   = prometheus.NewDesc("termgate_executions_ended_total", "Executions ended, by status.", []string{"status"}, nil)
)

// Describe implements prometheus.Collector.
func (executionsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRunning
	ch <- descStarted
	ch <- descEnded
}

// Collect implements prometheus.Collector.
func (c executionsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.sup.Stats()
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(st.Running))
	ch <- prometheus.MustNewConstMetric(descStarted, prometheus.CounterValue, float64(st.StartedTotal))
	for _, s := range endedStatuses {
		ch <- prometheus.MustNewConstMetric(descEnded, prometheus.CounterValue, float64(st.ByStatus[s]), string(s))
	}
	for s, n := range st.ByStatus { // a status added later still shows
		if !slices.Contains(endedStatuses, s) {
			ch <- prometheus.MustNewConstMetric(descEnded, prometheus.CounterValue, float64(n), string(s))
		}
	}
}
