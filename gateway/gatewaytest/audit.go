package gatewaytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// AuditRecords reads every record of an audit trail's files, in the
// order given (gateway/audit.Files lists them oldest first), and fails t
// on a file that ends inside a record or a line that is not one whole
// JSON object of at most maxRecord bytes.
func AuditRecords(t testing.TB, files []string, maxRecord int) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Fatalf("%s ends inside a record: %q", f, b[max(0, len(b)-80):])
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, maxRecord)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: a line is not a record: %q: %v", f, sc.Text(), err)
			}
			out = append(out, m)
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	return out
}
