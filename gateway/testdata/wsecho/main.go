// Command wsecho serves, on the address its first argument names, a
// WebSocket echo at /echo and a page at / that sets a cookie: the
// program the preview tests run in a sandbox.
package main

import (
	"net/http"
	"os"

	"github.com/coder/websocket"
)

func main() {
	http.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if c.Write(r.Context(), typ, b) != nil {
				return
			}
		}
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "app", Value: "1"})
		http.SetCookie(w, &http.Cookie{Name: "wide", Value: "1", Domain: "preview.test"})
		w.Write([]byte("path=" + r.URL.Path + " host=" + r.Host + " auth=" + r.Header.Get("Authorization") + " cookie=" + r.Header.Get("Cookie") + " xfh=" + r.Header.Get("X-Forwarded-Host")))
	})
	http.ListenAndServe(os.Args[1], nil)
}
