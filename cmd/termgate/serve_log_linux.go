package main

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/termgate/termgate/gateway"
	"github.com/termgate/termgate/gateway/audit"
	"github.com/termgate/termgate/replay"
	"github.com/termgate/termgate/sandbox"
	"github.com/termgate/termgate/session"
)

// newLevelLogger returns serve's logger: JSON or text lines at level and
// above. Both escape control characters (C0, C1 and DEL), so a value
// cannot forge a line or a terminal sequence.
func newLevelLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("serve: --log-level: %w", err)}
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(c1Escaper{w}, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("serve: --log-format: want json or text, got %q", format)}
}

// logConfig prints the effective configuration; it holds file paths, never secrets.
func (o *serveOptions) logConfig(log *slog.Logger) {
	log.Info("config", "config_file", o.config, "listen", o.listen, "tls", o.tlsCert != "", "jwt_secret_file", o.secretFile,
		"jwt_public_keys", o.publicKeys, "jwt_jwks_urls", o.jwksURLs, "jwt_jwks_refresh", durationText(o.jwksRefresh),
		"jwt_issuers", o.issuers, "jwt_tenant_bindings", o.bindings, "jwt_audience", o.audience, "jwt_leeway", durationText(o.leeway),
		"tenant_claim", o.tenantClaim, "origins", o.origins, "preview_domain", o.previewDomain, "trusted_proxies", o.trustedProxies, "query_token", o.queryToken,
		"workspace_root", o.workspaceRoot, "commands", commandsLog(o.commands), "default_command", o.defaultCommand,
		"network", o.network, "proc", o.proc, "limits", limitsLog(o.policy.Limits), "tenant_limits", limitsLog(o.sandbox.TenantLimits), "cgroup_parent", o.sandbox.CgroupParent, "tmp_size", sizeText(uint64(o.policy.TmpSize)), "ptys", o.policy.PTYs,
		"timeout", durationText(o.policy.DefaultTimeout), "max_timeout", durationText(o.policy.MaxTimeout), "retention", durationText(o.session.DefaultRetention),
		"interactive_timeout", durationText(o.policy.InteractiveTimeout), "interactive_idle_timeout", durationText(o.policy.IdleTimeout),
		"timeout_warning", durationText(o.timeoutWarning),
		"max_running", o.session.MaxRunning, "max_running_per_tenant", o.session.MaxRunningPerOwner,
		"max_retained", o.session.MaxRetained, "max_retained_per_tenant", o.session.MaxRetainedPerOwner,
		"scrollback", cmp.Or(o.session.Scrollback, session.DefaultScrollback),
		"max_snapshot_bytes", sizeText(uint64(o.screens.snapshotBytes(o.server.MaxMessageBytes))),
		"screen_memory", sizeText(uint64(o.screens.memory)), "screen_memory_per_tenant", sizeText(uint64(o.screens.perTenant)),
		"max_queued_bytes", sizeText(uint64(cmp.Or(o.server.MaxQueuedBytes, gateway.DefaultMaxQueuedBytes))),
		"max_queued_bytes_per_subject", sizeText(uint64(cmp.Or(o.server.MaxQueuedBytesPerSubject, gateway.DefaultMaxQueuedBytesPerSubject))),
		"flow", o.server.Flow, "hold", durationText(o.server.Hold), "max_hold", durationText(o.server.MaxHold),
		"ring_bytes", sizeText(uint64(cmp.Or(o.server.Ring.MaxBytes, replay.DefaultMaxBytes))),
		"ring_events", cmp.Or(o.server.Ring.MaxEvents, replay.DefaultMaxEvents),
		"idle_timeout", durationText(o.idleTimeout), "read_header_timeout", durationText(o.headerTimeout), "read_timeout", durationText(o.server.RequestReadTimeout),
		"max_conns", o.listener.MaxConns, "max_conns_per_addr", o.listener.MaxConnsPerAddr, "fd_headroom", o.fdHeadroom,
		"max_preauth_conns", cmp.Or(o.listener.MaxPreAuthConns, max(1, o.listener.MaxConns/4)), "first_byte_timeout", durationText(o.firstByteTimeout),
		"max_conns_per_subject", o.server.MaxConnsPerSubject, "starts_per_minute", o.server.StartsPerMinute, "input_per_second", o.server.InputPerSecond,
		"resizes_per_second", o.server.ResizesPerSecond,
		"tenant_uids", fmt.Sprintf("%d:%d", o.workspaces.tenantUIDs.First, o.workspaces.tenantUIDs.Count),
		"workspace_quota", quotaText(formatBytes(o.workspaces.bytes), o.workspaces.bytes), "workspace_inodes", quotaText(strconv.FormatInt(o.workspaces.inodes, 10), o.workspaces.bytes),
		"audit_log", o.audit.Path, "audit_max_size", sizeText(uint64(cmp.Or(o.audit.MaxSize, audit.DefaultMaxSize))), "audit_keep", o.audit.Keep,
		"recordings_dir", o.session.RecordingsDir, "recording_max_size", sizeText(uint64(o.session.RecordingMaxSize)),
		"recordings_max_bytes", sizeText(uint64(o.session.RecordingsMaxBytes)), "recordings_max_bytes_per_tenant", sizeText(uint64(o.session.RecordingsMaxBytesPerOwner)),
		"recordings_max_files", o.session.RecordingsMaxFiles, "recordings_max_files_per_tenant", o.session.RecordingsMaxFilesPerOwner,
		"recordings_retention", durationText(o.recordingsRetention),
		"record", recordText(o.server.Record), "record_input", o.server.Record.Input,
		"sigterm", o.sigterm, "dev", o.dev)
}

// commandsLog is the programs clients may start, the default included.
func commandsLog(list []string) []string {
	if len(list) == 0 {
		return gateway.DefaultCommands
	}
	return list
}

// durationText is d as people write it: 15m, 12h, 1m30s, not 15m0s.
func durationText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// limitsLog is an execution's ceilings as the startup log shows them:
// sizes as 1G, 0 as "none".
func limitsLog(l sandbox.Limits) slog.Value {
	count := func(v int64) slog.Value {
		if v == 0 {
			return slog.StringValue("none")
		}
		return slog.Int64Value(v)
	}
	size := func(v uint64) slog.Value {
		if v == 0 {
			return slog.StringValue("none")
		}
		return slog.StringValue(sizeText(v))
	}
	return slog.GroupValue(
		slog.Attr{Key: "memory", Value: size(uint64(l.Memory))},
		slog.Attr{Key: "pids", Value: count(l.Pids)},
		slog.Attr{Key: "cpu_weight", Value: count(int64(l.CPUWeight))},
		slog.Attr{Key: "file_size", Value: size(l.FileSize)},
		slog.Attr{Key: "cpu_seconds", Value: count(int64(l.CPUSeconds))},
		slog.Attr{Key: "open_files", Value: count(int64(l.OpenFiles))},
		slog.Attr{Key: "address_space", Value: size(l.AddressSpace)},
	)
}

// sizeText writes a byte count as parseSize reads it: 1G, 64M, 1536K, 100.
func sizeText(v uint64) string {
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}} {
		if v != 0 && v%(1<<u.shift) == 0 {
			return strconv.FormatUint(v>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatUint(v, 10)
}
