package gateway

import (
	_ "embed"
	"net/http"
)

// openAPI is the HTTP API's OpenAPI 3.1 document. Tests check it is
// valid and that every answer of the HTTP API's tests (and every request
// the server accepted) agrees with it (openapi_test.go).
//
//go:embed openapi.json
var openAPI []byte

// serveOpenAPI answers GET /v1/openapi.json: the document, to anyone (it
// holds nothing a token opens).
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(openAPI)
}
