// Package screen keeps the state of the terminal of one PTY execution and
// serializes it as escape sequences, so a client that reattaches after its
// history was evicted sees the screen a client that never left sees.
//
// A Screen is fed the program's output with Write, in any pieces: a
// sequence or a UTF-8 character split across calls is handled as if it came
// whole. Snapshot appends the sequences that, applied to a fresh terminal of
// the same size (xterm.js, or xterm and tmux behind the CLI), reproduce:
// the normal buffer with its bounded scrollback and the alternate buffer,
// which one is active, the cursor position, its visibility and shape, the
// pending wrap, colours (16, 256 and truecolor) and attributes (bold, dim,
// italic, underline, blink, inverse, hidden, strike) of every cell, the
// current pen, the cursors saved with DECSC, the scroll region, origin mode,
// autowrap, insert mode, application cursor keys and keypad, bracketed
// paste, mouse reporting (9, 1000, 1002, 1003 with encodings 1005, 1006,
// 1015), focus reporting, tab stops, the G0 charset (ASCII or DEC line
// drawing) and the window title (OSC 0 and 2). A snapshot starts with RIS
// (ESC c) and never holds a query (DA, DSR, DECRQM, OSC queries, XTVERSION,
// window reports), so the client never answers into the shell; the Screen
// itself ignores queries and never answers either.
//
// Wide characters (East Asian Wide and Fullwidth, emoji with emoji
// presentation, by Unicode 11 widths as in xterm.js's unicode11 addon) take
// two cells; a combining mark joins the cell before it (one per cell). The
// alternate buffer behaves as in xterm.js: it is cleared on every switch,
// has no scrollback, and the cursor position carries over.
//
// Not reproduced: the character REP repeats; underline styles (4:3 and
// others are kept as plain underline); the wrap flag of the last line of a
// buffer; a cursor restored outside the scroll region in origin mode (it is
// kept inside); tab stops are shared by both buffers. Resize cuts or pads
// lines and does not reflow them.
//
// A line holds the cells drawn on it, up to the width; the rest of it is
// blank without being stored, so a blank screen costs its rows, not its
// cells. Resize is as cheap: it cuts the lines wider than the new width,
// pads only lines that wrap, and adds or drops rows; it never blanks or
// allocates the whole screen. A resize of a 1000x1000 screen costs about
// its 1000 rows, whatever the sizes it goes between (BenchmarkResize).
//
// # Bounds
//
// Rows and Cols are at most MaxRows and MaxCols, Scrollback at most
// MaxScrollback lines, a title MaxTitle bytes. The memory of a Screen is
// at most about 2 * rows * cols * 24 bytes for the two buffers (the alternate one
// only once used) plus its scrollback, whose lines are kept encoded as the
// sequences that draw them: as many bytes as characters for plain text, a
// few more per change of colour, at most about 50 bytes per cell, and the
// pending plain run (see Fast path). Config.ScrollbackBytes bounds the
// scrollback's lines in bytes too, the oldest dropped first. MemoryBytes
// reports the memory; MemoryBound is the most it can be at a size, which
// a caller may reserve before it makes a Screen.
//
// SnapshotMax bounds a snapshot: when the whole scrollback would take it
// over its limit, it keeps the newest lines that fit; when the screen
// alone does not fit, there is none. It finds out holding at most the
// limit.
//
// # Fast path
//
// A fast program's output is mostly text that scrolls away. A plain run
// is bytes with no ESC and no C0 control other than \r \n \t \b; while no
// scroll region, origin mode or insert mode is set (none can change inside
// a plain run), everything such a run draws before its last keep =
// rows+scrollback newlines (rows in the alternate buffer) leaves the
// scrollback before the run ends. The Screen follows the cursor over that
// part without drawing it, and emulates the rest.
//
// The run need not come in one Write: plain text at the end of a Write is
// kept pending, and its head is skipped as more newlines come. It is
// emulated when a byte that is not plain text comes, and before Snapshot
// and Resize; Title and Size do not depend on it, and MemoryBytes counts
// it. The pending run holds at most (keep + keep/4 + 2) * (cols+2)
// bytes, about as much as a full scrollback of plain text and a quarter
// more (103 KiB for 80 columns and 1000 lines of scrollback); lines
// longer than that on average (wrapping, or of multi-byte characters)
// are emulated beyond it, and its buffer is dropped when emulated if it
// is over 16 KiB. The resulting state is the same as emulating every byte
// (the pen cannot change inside a plain run); tests compare both on
// random output written in random pieces.
//
// All methods of Screen are safe for concurrent use.
package screen
