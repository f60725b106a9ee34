package transcript

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func build(opt Options, chunks ...string) Result {
	b := New(opt)
	for _, c := range chunks {
		b.Write(1, []byte(c))
	}
	return b.Finish()
}

func TestCharacterSplitAcrossChunks(t *testing.T) {
	t.Parallel()
	// "é€😀" cut at every byte: no replacement character appears.
	s := "aé€😀z"
	for i := 0; i <= len(s); i++ {
		for j := i; j <= len(s); j++ {
			got := build(Options{Budget: 100}, s[:i], s[i:j], s[j:])
			if got.Text != s || got.Replaced != 0 || got.Omitted != 0 {
				t.Fatalf("cut at %d and %d: %+v", i, j, got)
			}
		}
	}
}

func TestStreamsDecodeApart(t *testing.T) {
	t.Parallel()
	b := New(Options{Budget: 100})
	e := []byte("é")
	b.Write(1, e[:1])
	b.Write(2, []byte("x"))
	b.Write(1, e[1:])
	if got := b.Finish(); got.Text != "xé" || got.Replaced != 0 {
		t.Fatalf("got %+v", got)
	}
}

func TestInvalidBytesReplacedAndCounted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in       []string
		want     string
		replaced int64
	}{
		{[]string{"a\xffb"}, "a\uFFFDb", 1},
		{[]string{"a\xe2\x82"}, "a\uFFFD\uFFFD", 2},               // cut off at the end
		{[]string{"\xe2", "x"}, "\uFFFDx", 1},                     // a start not followed by its rest
		{[]string{"\xe2\x82", "\xffy"}, "\uFFFD\uFFFD\uFFFDy", 3}, // ... across chunks
		{[]string{"\xc3", "", "\xa9"}, "é", 0},
	} {
		got := build(Options{Budget: 100}, c.in...)
		if got.Text != c.want || got.Replaced != c.replaced {
			t.Errorf("%q: got %q replaced %d, want %q and %d", c.in, got.Text, got.Replaced, c.want, c.replaced)
		}
	}
}

func TestHeadAndTail(t *testing.T) {
	t.Parallel()
	got := build(Options{Budget: 10}, "0123456789abcdefghij")
	if got.Text != "01234fghij" || got.Omitted != 10 || got.OmittedAt != 5 {
		t.Fatalf("got %+v", got)
	}
	got = build(Options{Budget: 10}, "0123456789")
	if got.Text != "0123456789" || got.Omitted != 0 {
		t.Fatalf("exactly the budget: got %+v", got)
	}
	// Characters are never cut: the head stops before one that does not
	// fit, the tail starts after one it holds only part of.
	got = build(Options{Budget: 8}, "ab€€cd€€ef")
	if !utf8.ValidString(got.Text) || int64(len(got.Text))+got.Omitted != int64(len("ab€€cd€€ef")) {
		t.Fatalf("got %+v", got)
	}
	if got.Text != "abef" || got.OmittedAt != 2 {
		t.Fatalf("got %+v", got)
	}
}

func TestStripANSI(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"\x1b[1;31mred\x1b[0m\r\n":                  "red\n",
		"a\x1b]0;title\x07b":                        "ab",
		"a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\": "alink",
		"\x1bPq#0;2;0;0;0\x1b\\after":               "after",
		"bell\x07 tab\tcr\rdone":                    "bell tab\tcr\rdone",
		"\x1b(Bascii\x1b=":                          "ascii",
		"\u009b31mC1\u009b0m":                       "C1",
		"\x1b[?2004h$ \x1b[?2004l\r\n":              "$ \n",
		"progress 50%\rprogress 100%\r\n":           "progress 50%\rprogress 100%\n",
		"trailing\r":                                "trailing\r",
	} {
		if got := build(Options{Budget: 1 << 10, StripANSI: true}, in); got.Text != want {
			t.Errorf("%q: got %q, want %q", in, got.Text, want)
		}
		// The same cut at every byte.
		for i := range len(in) {
			if got := build(Options{Budget: 1 << 10, StripANSI: true}, in[:i], in[i:]); got.Text != want {
				t.Errorf("%q cut at %d: got %q, want %q", in, i, got.Text, want)
			}
		}
	}
}

func TestUnendedStringIsBounded(t *testing.T) {
	t.Parallel()
	in := "\x1b]" + strings.Repeat("x", maxSequence+10)
	got := build(Options{Budget: 1 << 20, StripANSI: true}, in)
	if len(got.Text) == 0 || len(got.Text) > 16 {
		t.Fatalf("an OSC that never ends shows what follows its bound: %d bytes", len(got.Text))
	}
}

// FuzzBuilder checks what holds for any output cut anywhere: the same
// text whatever the chunks, valid UTF-8, and head, omitted and tail
// adding up to the whole text.
func FuzzBuilder(f *testing.F) {
	f.Add([]byte("hello\x1b[31mworld\r\n\xff€"), uint8(3), uint16(7), true)
	f.Add([]byte("😀😀😀😀"), uint8(1), uint16(5), false)
	f.Fuzz(func(t *testing.T, data []byte, step uint8, budget uint16, strip bool) {
		whole := build(Options{Budget: 1 << 30, StripANSI: strip}, string(data))
		n := max(int(step), 1)
		var chunks []string
		for i := 0; i < len(data); i += n {
			chunks = append(chunks, string(data[i:min(i+n, len(data))]))
		}
		got := build(Options{Budget: 1 << 30, StripANSI: strip}, chunks...)
		if got != whole {
			t.Fatalf("chunks of %d: %+v, whole: %+v", n, got, whole)
		}
		if !utf8.ValidString(got.Text) {
			t.Fatalf("not UTF-8: %q", got.Text)
		}
		cut := build(Options{Budget: int(budget), StripANSI: strip}, chunks...)
		if int64(len(cut.Text))+cut.Omitted != int64(len(whole.Text)) {
			t.Fatalf("budget %d: %d bytes + %d omitted != %d", budget, len(cut.Text), cut.Omitted, len(whole.Text))
		}
		if len(cut.Text) > max(int(budget), 1) || !utf8.ValidString(cut.Text) {
			t.Fatalf("budget %d: %q", budget, cut.Text)
		}
		if !strings.HasPrefix(whole.Text, cut.Text[:cut.OmittedAt]) || !strings.HasSuffix(whole.Text, cut.Text[cut.OmittedAt:]) {
			t.Fatalf("budget %d: %q is not head and tail of %q", budget, cut.Text, whole.Text)
		}
		if cut.Replaced != whole.Replaced {
			t.Fatalf("replaced %d, whole %d", cut.Replaced, whole.Replaced)
		}
	})
}

// BenchmarkBuilder: 32 KiB reads of log-like text, plain and stripped.
func BenchmarkBuilder(b *testing.B) {
	chunk := []byte(strings.Repeat("2026-12-07 build step 42: \x1b[32mok\x1b[0m é\r\n", 32<<10/44))
	for _, strip := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "strip"}[strip], func(b *testing.B) {
			b.SetBytes(int64(len(chunk)))
			t := New(Options{Budget: 64 << 10, StripANSI: strip})
			for b.Loop() {
				t.Write(1, chunk)
			}
		})
	}
}
