//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
	"github.com/termgate/termgate/gateway/wire"
)

// PTY output (issue 47's third target): `cat` of a file of base64 lines
// on a terminal of 24x80, read to its end through termgate, beside two
// floors in the same rounds with the same file:
//
//   - the bare read: the same `cat` on a fresh PTY whose master this
//     process reads, blocking, 64 KiB at a time (what the target compares
//     with; peerbench's ptyraw);
//   - the bare delivery: the floors' server, another process, runs it on
//     a PTY and sends each read as a WebSocket message to this one (the
//     least a gateway does to deliver it to a client).
//
// Each is timed from its first output byte to its last, so a sandbox's
// start is not counted, and each must deliver every byte: the file with
// each "\n" made "\r\n" by the terminal. termgate's client attaches with
// ack and acknowledges as it reads, as termgate's own clients do, so
// output waits for it rather than being lost. The rounds alternate the
// three; the figures are each one's median and the median of the
// rounds' ratios.

// maxOutputRounds bounds -output-rounds: each round's execution stays
// retained, and serve is given room for 16 beyond the shells (serveArgs).
const maxOutputRounds = 10

// outputFile is the file's name in the tenant's workspace.
const outputFile = "termgate-load-output.txt"

// outputRun is one read of the whole output.
type outputRun struct {
	took    time.Duration // first byte to last
	machine time.Duration // the machine's busy CPU over the run
}

// outputTable is the rounds' runs, each a round's bare read, bare
// delivery and termgate.
type outputTable struct {
	bytes  int64 // the terminal's output of the file
	rounds [][3]outputRun
}

// Which run of a round is which.
const (
	runBare = iota
	runDelivery
	runTermgate
)

// output writes the file into the tenant's workspace, starts the
// floors' server and measures o.outputRounds rounds.
func (t *table) output(ctx context.Context, srv *server, o options) error {
	path, want, err := writeOutputFile(ctx, srv, o.outputMiB<<20)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	floorAddr, stop, err := startFloorServer(ctx)
	if err != nil {
		return fmt.Errorf("floor server: %w", err)
	}
	defer stop()
	t.out.bytes = want
	for round := range o.outputRounds {
		var r [3]outputRun
		runs := [3]func() (outputRun, int64, error){
			func() (outputRun, int64, error) { return bareOutput(ctx, path) },
			func() (outputRun, int64, error) { return deliveredOutput(ctx, floorAddr, path) },
			func() (outputRun, int64, error) { return termgateOutput(ctx, srv, round) },
		}
		for i, run := range runs {
			got, n, err := run()
			if err == nil && n != want {
				err = fmt.Errorf("%d bytes of output, want %d", n, want)
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, outputNames[i], err)
			}
			r[i] = got
		}
		t.out.rounds = append(t.out.rounds, r)
	}
	return nil
}

var outputNames = [3]string{"bare read", "bare delivery", "termgate"}

// writeOutputFile makes the tenant's workspace (a first start makes it),
// writes about size bytes of 76-column base64 lines there, and returns
// the file's path from this process and the bytes a terminal turns it
// into.
func writeOutputFile(ctx context.Context, srv *server, size int) (string, int64, error) {
	s, err := dial(ctx, srv, "output-workspace", "/bin/sh", "-c", "true")
	if err != nil {
		return "", 0, err
	}
	s.close()
	// A workspace is a directory of w/, or with a quota (serve's default)
	// an image mounted on mnt/; reached through serve's root, whichever
	// mount namespace serve mounts it in.
	root := filepath.Join("/proc", strconv.Itoa(srv.pid), "root", srv.dir, "ws")
	dirs, _ := filepath.Glob(filepath.Join(root, "w", "*"))
	mounted, _ := filepath.Glob(filepath.Join(root, "mnt", "*"))
	dirs = append(dirs, mounted...)
	if len(dirs) != 1 {
		return "", 0, fmt.Errorf("want the one tenant workspace under %s, found %q", srv.dir, dirs)
	}
	var st os.FileInfo
	if st, err = os.Stat(dirs[0]); err != nil {
		return "", 0, err
	}
	path := filepath.Join(dirs[0], outputFile)
	lines := max(1, size/77)
	b := make([]byte, 0, lines*77)
	rnd := rand.New(rand.NewChaCha8([32]byte{'t', 'e', 'r', 'm', 'g', 'a', 't', 'e'}))
	raw := make([]byte, 57) // 76 characters of base64
	for range lines {
		for i := range raw {
			raw[i] = byte(rnd.Uint32())
		}
		b = base64.StdEncoding.AppendEncode(b, raw)
		b = append(b, '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", 0, fmt.Errorf("write the output file into the workspace (lower -output-mib?): %w", err)
	}
	uid, gid := ownerOf(st)
	if err := os.Chown(path, uid, gid); err != nil {
		os.Remove(path)
		return "", 0, err
	}
	return path, int64(len(b) + lines), nil
}

// bareOutput reads cat's output of path on a fresh PTY in this process.
func bareOutput(ctx context.Context, path string) (outputRun, int64, error) {
	cmd := exec.CommandContext(ctx, "cat", path)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		return outputRun{}, 0, err
	}
	defer func() { f.Close(); cmd.Wait() }()
	var m meter
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf) // blocking; EIO once cat ended
		m.add(n)
		if err != nil {
			return m.run(), m.n, nil
		}
	}
}

// deliveredOutput reads the output of path that the floors' server sends.
func deliveredOutput(ctx context.Context, addr, path string) (outputRun, int64, error) {
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/output?file="+url.QueryEscape(path), nil)
	if err != nil {
		return outputRun{}, 0, err
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	var m meter
	var buf bytes.Buffer
	for {
		_, b, err := readMessage(ctx, c, &buf)
		if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
			return m.run(), m.n, nil
		}
		if err != nil {
			return outputRun{}, m.n, err
		}
		m.add(len(b))
	}
}

// outputAckEvery is how much output termgate's reader takes between
// acknowledgements: an eighth of serve's default ring, which output may
// get ahead of them.
const outputAckEvery = 128 << 10

// termgateOutput starts cat of the workspace's file on a PTY (through
// sh, which serve allows by default and which execs it), attached with
// ack, and reads it to the exit.
func termgateOutput(ctx context.Context, srv *server, round int) (outputRun, int64, error) {
	ws, _, err := websocket.Dial(ctx, "ws://"+srv.addr+"/v1/connect", &websocket.DialOptions{
		Subprotocols: []string{wire.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + srv.token}},
	})
	if err != nil {
		return outputRun{}, 0, fmt.Errorf("connect: %w", err)
	}
	s := &session{ws: ws}
	defer s.close()
	ws.SetReadLimit(64 << 20)
	err = s.send(ctx, wire.Request{Type: wire.TypeStart, ID: fmt.Sprintf("output-%d", round), Command: "/bin/sh",
		Args: []string{"-c", "exec cat /workspace/" + outputFile}, PTY: &wire.Size{Rows: 24, Cols: 80}, Attach: true, Ack: true,
		TimeoutMS: 600_000})
	if err != nil {
		return outputRun{}, 0, err
	}
	var m meter
	var unacked int
	for {
		msg, out, err := s.read(ctx)
		switch {
		case err != nil:
			return outputRun{}, m.n, err
		case out != nil:
			m.add(len(out.Data))
			if unacked += len(out.Data); unacked >= outputAckEvery {
				unacked = 0
				if err := s.send(ctx, wire.Request{Type: wire.TypeAck, Channel: out.Channel, Seq: out.Seq}); err != nil {
					return outputRun{}, m.n, err
				}
			}
		case msg.Type == wire.MsgGap || msg.Type == wire.MsgSnapshot:
			return outputRun{}, m.n, fmt.Errorf("output lost: %s of %d bytes (%s)", msg.Type, msg.Bytes, msg.Cause)
		case msg.Type == wire.MsgError:
			return outputRun{}, m.n, fmt.Errorf("%s: %s", msg.Error, msg.Message)
		case msg.Type == wire.MsgExit:
			if msg.Code == nil || *msg.Code != 0 {
				return outputRun{}, m.n, fmt.Errorf("cat ended without success: %+v", msg)
			}
			return m.run(), m.n, nil
		}
	}
}

// readMessage reads the next message into buf, which it reuses: the
// measuring process's reads cost the machine's two cores what a client
// that keeps its buffer pays, as peerbench's does (websocket.Conn.Read
// grows a new buffer from 512 bytes for each message).
func readMessage(ctx context.Context, c *websocket.Conn, buf *bytes.Buffer) (websocket.MessageType, []byte, error) {
	typ, r, err := c.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		return 0, nil, err
	}
	return typ, buf.Bytes(), nil
}

// meter times output from its first byte to its last, and counts the
// machine's CPU over the same time.
type meter struct {
	n           int64
	first, last time.Time
	busyFirst   time.Duration
}

func (m *meter) add(n int) {
	if n <= 0 {
		return
	}
	now := time.Now()
	if m.n == 0 {
		m.first, m.busyFirst = now, machineBusy()
	}
	m.n += int64(n)
	m.last = now
}

func (m *meter) run() outputRun {
	if m.n == 0 {
		return outputRun{}
	}
	return outputRun{took: m.last.Sub(m.first), machine: machineBusy() - m.busyFirst}
}

// serveOutput is the floors' server's side of the bare delivery: cat of
// the file the query names on a fresh PTY, each read sent as a binary
// message, and a normal close at its end.
func serveOutput(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	cmd := exec.CommandContext(r.Context(), "cat", r.URL.Query().Get("file"))
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		c.Close(websocket.StatusInternalError, err.Error())
		return
	}
	defer func() { f.Close(); cmd.Wait() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if c.Write(r.Context(), websocket.MessageBinary, buf[:n]) != nil {
				return
			}
		}
		if err != nil { // EIO once cat ended
			c.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

// outputRows are the table's rows for the output rounds.
func (t table) outputRows() []string {
	if len(t.out.rounds) == 0 {
		return nil
	}
	mibps := func(r outputRun) float64 { return float64(t.out.bytes) / (1 << 20) / r.took.Seconds() }
	msPerMiB := func(r outputRun) float64 {
		return float64(r.machine.Microseconds()) / 1000 / (float64(t.out.bytes) / (1 << 20))
	}
	median := func(f func(outputRun) float64, i int) float64 {
		v := make([]float64, 0, len(t.out.rounds))
		for _, r := range t.out.rounds {
			v = append(v, f(r[i]))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	ratio := func(i int) float64 {
		v := make([]float64, 0, len(t.out.rounds))
		for _, r := range t.out.rounds {
			v = append(v, mibps(r[runTermgate])/mibps(r[i]))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	head := fmt.Sprintf("PTY output, cat of %.1f MiB of base64 lines (rounds: %d, medians)", float64(t.out.bytes)/(1<<20), len(t.out.rounds))
	return []string{
		fmt.Sprintf("| %s: termgate, acknowledged | %.1f MiB/s, machine CPU %.1f ms/MiB |", head, median(mibps, runTermgate), median(msPerMiB, runTermgate)),
		fmt.Sprintf("| floor: a bare blocking read of the PTY | %.1f MiB/s, %.1f ms/MiB (termgate %.2fx) |", median(mibps, runBare), median(msPerMiB, runBare), ratio(runBare)),
		fmt.Sprintf("| floor: bare delivery (each read of the PTY a WebSocket message to another process) | %.1f MiB/s, %.1f ms/MiB (termgate %.2fx) |", median(mibps, runDelivery), median(msPerMiB, runDelivery), ratio(runDelivery)),
	}
}

// ownerOf returns the uid and gid that own a file.
func ownerOf(fi os.FileInfo) (int, int) {
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}
