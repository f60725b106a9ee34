package gateway

// Recordings (session/recording.go writes them): which executions are
// recorded, and GET /v1/executions/{id}/recording, which serves one.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/termgate/termgate/gateway/auth"
	"github.com/termgate/termgate/gateway/wire"
	"github.com/termgate/termgate/session"
)

// ScopeRecord lets a token ask for a recording in a start (record,
// record_input). Tenants the server records anyway need no scope.
const ScopeRecord = "exec:record"

// RecordPolicy says which executions the server records, when the
// supervisor has a recordings directory.
type RecordPolicy struct {
	All     bool     // every tenant's executions
	Tenants []string // these tenants' executions
	// Input records the input of every recorded execution, not only of
	// those whose start asks for it (input can hold passwords).
	Input bool
}

// ParseRecordPolicy parses --record: "all", "none" (or empty), or a
// comma-separated list of tenants.
func ParseRecordPolicy(s string) (RecordPolicy, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return RecordPolicy{All: true}, nil
	case "none", "":
		return RecordPolicy{}, nil
	}
	var p RecordPolicy
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			return RecordPolicy{}, fmt.Errorf("record: an empty tenant in %q: give all, none or tenant,tenant", s)
		}
		p.Tenants = append(p.Tenants, t)
	}
	return p, nil
}

// Enabled reports whether the policy records anything by itself.
func (p RecordPolicy) Enabled() bool { return p.All || len(p.Tenants) > 0 }

// covers reports whether the policy records tenant's executions.
func (p RecordPolicy) covers(tenant string) bool { return p.All || slices.Contains(p.Tenants, tenant) }

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
