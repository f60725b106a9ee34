// Package web will embed the browser terminal.
package web
