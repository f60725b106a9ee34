package replay

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"
)

var errStopped = errors.New("test: stopped")

func TestWaitDoneContextReturnsAtOnce(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name  string
			evs   []Event
			after uint64
		}{
			{"nothing available", nil, 0},
			{"events available", []Event{sized(1), sized(2)}, 0},
			{"closed", []Event{exitEvent(0)}, 1},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{}, tt.evs...)
				ctx, cancel := context.WithCancelCause(t.Context())
				cancel(errStopped)
				if err := r.Wait(ctx, tt.after); !errors.Is(err, errStopped) {
					t.Errorf("Wait: %v, want the cause %v", err, errStopped)
				}
				if _, _, err := r.Cursor(tt.after).Next(ctx); !errors.Is(err, errStopped) {
					t.Errorf("Next: %v, want the cause %v", err, errStopped)
				}
			})
		}
	})
}

func TestWaitReturnsWithoutBlocking(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name  string
			evs   []Event
			after uint64
		}{
			{"newer event", []Event{sized(1), sized(2)}, 1},
			{"closed and caught up", []Event{sized(1), exitEvent(0)}, 2},
			{"closed, after from the future", []Event{exitEvent(0)}, 7},
			{"newer event evicted", []Event{sized(1), sized(2), sized(3), sized(4)}, 1},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := m.filled(t, Config{MaxEvents: 2}, tt.evs...)
				if err := r.Wait(t.Context(), tt.after); err != nil {
					t.Errorf("Wait: %v", err)
				}
			})
		}
	})
}

// waitAsync starts Wait in a goroutine of the current bubble and returns
// a channel with its result.
func waitAsync(ctx context.Context, r *Ring, after uint64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Wait(ctx, after) }()
	return done
}

// blocked reports whether done has no result once every goroutine of the
// bubble is blocked.
func blocked(done <-chan error) bool {
	synctest.Wait()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func TestWaitWakesOnAppend(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name   string
			after  uint64
			wake   Event
			before int // events appended before the one that should wake
		}{
			{"output", 1, sized(1), 0},
			{"resize", 1, Event{Kind: KindResize, Rows: 2, Cols: 3}, 0},
			{"exit", 1, exitEvent(0), 0},
			{"reader from the future", 4, sized(1), 3},
			{"exit wakes a reader from the future", 9, exitEvent(0), 2},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					r := m.filled(t, Config{}, Event{Kind: KindStarted})
					done := waitAsync(t.Context(), r, tt.after)
					for range tt.before {
						r.Append(sized(1))
						if !blocked(done) {
							t.Fatal("Wait returned before an event newer than after")
						}
					}
					r.Append(tt.wake)
					if err := <-done; err != nil {
						t.Errorf("Wait: %v", err)
					}
				})
			})
		}
	})
}

func TestWaitWakesManyWaiters(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			r := m.new(Config{})
			var waits []<-chan error
			for range 5 {
				waits = append(waits, waitAsync(t.Context(), r, 0))
			}
			synctest.Wait()
			r.AppendOutput(StreamPTY, []byte("x"))
			for _, done := range waits {
				if err := <-done; err != nil {
					t.Errorf("Wait: %v", err)
				}
			}
		})
	})
}

func TestWaitCancelled(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		tests := []struct {
			name   string
			cancel func(context.CancelCauseFunc)
			want   error
		}{
			{"with a cause", func(c context.CancelCauseFunc) { c(errStopped) }, errStopped},
			{"without a cause", func(c context.CancelCauseFunc) { c(nil) }, context.Canceled},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					r := m.filled(t, Config{}, Event{Kind: KindStarted})
					ctx, cancel := context.WithCancelCause(t.Context())
					done := waitAsync(ctx, r, 1)
					if !blocked(done) {
						t.Fatal("Wait returned with nothing new")
					}
					tt.cancel(cancel)
					if err := <-done; !errors.Is(err, tt.want) {
						t.Errorf("Wait: %v, want %v", err, tt.want)
					}
					// The abandoned wake channel is harmless: the next Append closes it.
					if _, err := r.AppendOutput(StreamPTY, []byte("x")); err != nil {
						t.Error(err)
					}
				})
			})
		}
	})
}

func TestWaitTimeout(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			r := m.new(Config{})
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			start := time.Now()
			if err := r.Wait(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Wait: %v, want DeadlineExceeded", err)
			}
			if waited := time.Since(start); waited != time.Minute {
				t.Errorf("waited %v, want 1m", waited)
			}
		})
	})
}

func TestCursorNextFollowsLive(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		t.Parallel()
		synctest.Test(t, func(t *testing.T) {
			r := m.filled(t, Config{}, Event{Kind: KindStarted})
			c := r.Cursor(0)
			type result struct {
				evs []Event
				err error
			}
			results := make(chan result)
			go func() {
				for {
					evs, _, err := c.Next(t.Context())
					results <- result{evs, err}
					if err != nil {
						return
					}
				}
			}()
			if got := <-results; len(got.evs) != 1 || got.evs[0].Kind != KindStarted {
				t.Fatalf("first batch %+v", got)
			}
			for i, ev := range []Event{sized(3), {Kind: KindStdinClosed}, exitEvent(0)} {
				synctest.Wait()
				r.Append(ev)
				if got := <-results; got.err != nil || len(got.evs) != 1 || got.evs[0].Seq != uint64(i+2) {
					t.Fatalf("batch for seq %d: %v, %v", i+2, seqs(got.evs), got.err)
				}
			}
			if got := <-results; !errors.Is(got.err, io.EOF) {
				t.Errorf("after exit: %v, want io.EOF", got.err)
			}
		})
	})
}
