package main

import (
	"io"

	"github.com/termgate/termgate/gateway/wire"
)

// c1Escaper passes JSON log lines on with DEL and the C1 controls
// escaped (wire.EscapeC1), which slog's JSON handler writes raw. The
// handler writes one record per Write, so no escape is ever split.
type c1Escaper struct{ w io.Writer }

func (e c1Escaper) Write(p []byte) (int, error) {
	if _, err := e.w.Write(wire.EscapeC1(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
