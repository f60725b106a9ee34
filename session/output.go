package session

import (
	"sync"
	"unicode/utf8"
)

// headTail keeps the first and last bytes of a stream within a budget:
// half for the head, half for the tail (a ring buffer).
type headTail struct {
	mu     sync.Mutex
	budget int
	head   []byte
	tail   []byte // ring buffer of at most budget/2 bytes once full
	pos    int    // next write position in tail once it is full
	total  int64
	noHead bool // the stream's first bytes are lost: everything goes to the tail
}

func newHeadTail(budget int) *headTail { return &headTail{budget: budget} }

func (h *headTail) Write(p []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total += int64(len(p))
	if room := h.budget/2 - len(h.head); room > 0 && !h.noHead {
		n := min(room, len(p))
		h.head = append(h.head, p[:n]...)
		p = p[n:]
	}
	h.appendTail(p)
}

// lose counts n bytes that came first and are no longer known (a restored
// execution's output evicted before the restart): they are omitted, and
// the head stays empty rather than show later bytes as the first.
func (h *headTail) lose(n int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n > 0 {
		h.total += n
		h.noHead = true
	}
}

func (h *headTail) appendTail(p []byte) {
	limit := h.budget - h.budget/2
	if len(p) >= limit {
		h.tail = append(h.tail[:0], p[len(p)-limit:]...)
		h.pos = 0
		return
	}
	for len(p) > 0 {
		if len(h.tail) < limit {
			n := min(limit-len(h.tail), len(p))
			h.tail = append(h.tail, p[:n]...)
			p = p[n:]
			continue
		}
		n := copy(h.tail[h.pos:], p)
		h.pos = (h.pos + n) % limit
		p = p[n:]
	}
}

// result returns the retained output, cut so that no UTF-8 character is
// split: the head ends and the tail starts on a character boundary.
func (h *headTail) result() Output {
	h.mu.Lock()
	defer h.mu.Unlock()
	tail := append(append([]byte(nil), h.tail[h.pos:]...), h.tail[:h.pos]...)
	head := append([]byte(nil), h.head...)
	if int64(len(head)+len(tail)) < h.total {
		head = head[:validPrefix(head)]
		tail = tail[validSuffixStart(tail):]
	} else {
		head = append(head, tail...)
		tail = nil
	}
	retained := int64(len(head) + len(tail))
	return Output{Head: head, Tail: tail, Original: h.total, Retained: retained,
		Omitted: h.total - retained, Truncated: retained < h.total}
}

// validPrefix returns the length of b without a trailing partial character.
func validPrefix(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// validSuffixStart skips continuation bytes at the start of b.
func validSuffixStart(b []byte) int {
	for i := 0; i < len(b) && i < utf8.UTFMax; i++ {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return 0
}
