package replay_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/termgate/termgate/replay"
)

// A reader follows an execution with a Cursor until the exit event.
func Example() {
	ring := replay.New(replay.Config{})
	ring.Append(replay.Event{Kind: replay.KindStarted, Rows: 24, Cols: 80})
	ring.AppendOutput(replay.StreamPTY, []byte("hello, "))
	ring.AppendOutput(replay.StreamPTY, []byte("world\r\n"))
	ring.Append(replay.Event{Kind: replay.KindExit, Exit: &replay.ExitInfo{Code: 0, Reason: "exited"}})

	cursor := ring.Cursor(0)
	for {
		events, gap, err := cursor.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if gap != nil {
			fmt.Printf("missed %d..%d\n", gap.From, gap.To-1)
			continue
		}
		for _, ev := range events {
			switch ev.Kind {
			case replay.KindOutput:
				fmt.Printf("%d %s %s@%d %q\n", ev.Seq, ev.Kind, ev.Stream, ev.Offset, ev.Data)
			case replay.KindExit:
				fmt.Printf("%d %s %s\n", ev.Seq, ev.Kind, ev.Exit.Reason)
			default:
				fmt.Printf("%d %s\n", ev.Seq, ev.Kind)
			}
		}
	}
	// Output:
	// 1 started
	// 2 output pty@0 "hello, "
	// 3 output pty@7 "world\r\n"
	// 4 exit exited
}

// A reader that fell behind learns what it missed and carries on.
func ExampleRing_Read() {
	ring := replay.New(replay.Config{MaxEvents: 2})
	for _, s := range []string{"a", "bb", "ccc", "dddd"} {
		ring.AppendOutput(replay.StreamStdout, []byte(s))
	}
	events, gap := ring.Read(nil, 0, 0, 0)
	fmt.Printf("gap %d..%d, %d bytes\n", gap.From, gap.To-1, gap.Bytes)
	events, _ = ring.Read(events, gap.To-1, 0, 0)
	for _, ev := range events {
		fmt.Printf("%d %q at %d\n", ev.Seq, ev.Data, ev.Offset)
	}
	// Output:
	// gap 1..2, 3 bytes
	// 3 "ccc" at 3
	// 4 "dddd" at 6
}
