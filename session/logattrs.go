package session

import "context"

type logAttrsKey struct{}

// WithLogAttrs returns ctx carrying attrs (slog key and value pairs) for
// every lifecycle log line of an execution that Start, given ctx,
// creates: who started it and from where. Never a token or a secret.
func WithLogAttrs(ctx context.Context, attrs ...any) context.Context {
	return context.WithValue(ctx, logAttrsKey{}, append(logAttrs(ctx), attrs...))
}

func logAttrs(ctx context.Context) []any {
	a, _ := ctx.Value(logAttrsKey{}).([]any)
	return a[:len(a):len(a)]
}
