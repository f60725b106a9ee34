package gateway

// Recordings (session/recording.go writes them): which executions are
// recorded, and GET /v1/executions/{id}/recording, which serves one.

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// ScopeRecord lets a token ask for a recording in a start (record,
// record_input). Tenants the server records anyway need no scope.
const ScopeRecord = "exec:record"

// recordStart sets whether the execution spec starts is recorded: when
// the server records its tenant, or the start asks (record or
// record_input) and the token has ScopeRecord. A refusal is the code and
// message to answer; empty when allowed.
func (s *Server) recordStart(c auth.Claims, req wire.Request, spec *session.Spec) (code, msg string) {
	asked := req.Record || req.RecordInput
	on := s.cfg.Supervisor.Recording()
	switch {
	case asked && !c.Has(ScopeRecord):
		return wire.CodeForbidden, "the token lacks the " + ScopeRecord + " scope"
	case asked && !on:
		return wire.CodeInvalidSpec, "recordings are off on this server"
	case !on:
		return "", ""
	}
	spec.Record = asked || s.cfg.Record.covers(c.Tenant)
	spec.RecordInput = spec.Record && (req.RecordInput || s.cfg.Record.Input)
	return "", ""
}

// errNoRecording answers for an execution without a recording, as for
// an unknown one.
var errNoRecording = &apiError{wire.CodeNotFound, "the execution has no recording"}

// recording serves an execution's recording as an asciicast v2
// download: what is written so far of one still being written.
func (a *httpAPI) recording(w http.ResponseWriter, r *http.Request, c auth.Claims) error {
	id := r.PathValue("id")
	f, size, err := a.s.cfg.Supervisor.OpenRecording(c.Tenant, id)
	if errors.Is(err, session.ErrNoRecording) {
		return errNoRecording
	}
	if err != nil {
		return err
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/x-asciicast")
	// The ID matched session's pattern: no quote, slash or control byte.
	h.Set("Content-Disposition", `attachment; filename="`+id+`.cast"`)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, "", time.Time{}, io.NewSectionReader(f, 0, size))
	return nil
}
