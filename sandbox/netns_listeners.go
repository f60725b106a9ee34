//go:build linux

package sandbox

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
)

// MaxListeners bounds the listening sockets Listeners reports: a
// program that opens more is told about in its first MaxListeners.
const MaxListeners = 256

// tcpListen is TCP_LISTEN, the state column of /proc/net/tcp.
const tcpListen = 0x0A

// Listeners lists the TCP sockets listening in the namespace (IPv4 and
// IPv6, each address and port once, sorted), as the kernel's tables show
// them from inside: /proc/net/tcp and tcp6, opened on a thread that
// enters the namespace. A socket bound to a wildcard address is listed
// with it (0.0.0.0, ::). At most MaxListeners.
func (ns *NetNS) Listeners() ([]netip.AddrPort, error) {
	var tables []*os.File
	var err error
	onLockedThread(func() error {
		err = ns.here(func() error {
			for _, name := range []string{"tcp", "tcp6"} {
				f, err := os.Open("/proc/thread-self/net/" + name)
				if errors.Is(err, fs.ErrNotExist) && name == "tcp6" {
					continue // a kernel without IPv6
				}
				if err != nil {
					return fmt.Errorf("sandbox: the namespace's %s table: %w", name, err)
				}
				tables = append(tables, f) // bound to the namespace it was opened in
			}
			return nil
		})
		return err
	})
	defer func() {
		for _, f := range tables {
			f.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	var out []netip.AddrPort
	for _, f := range tables {
		if out, err = listening(f, out); err != nil {
			return nil, fmt.Errorf("sandbox: read %s: %w", f.Name(), err)
		}
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

// listening appends the listening sockets of a /proc/net/tcp or tcp6
// table to out, up to MaxListeners.
func listening(r io.Reader, out []netip.AddrPort) ([]netip.AddrPort, error) {
	sc := bufio.NewScanner(r)
	sc.Scan() // the heading
	for sc.Scan() && len(out) < MaxListeners {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		if st, err := strconv.ParseUint(fields[3], 16, 8); err != nil || st != tcpListen {
			continue
		}
		ap, err := procAddr(fields[1])
		if err != nil {
			return out, err
		}
		out = append(out, ap)
	}
	return out, sc.Err()
}

// procAddr parses a /proc/net/tcp address: the address as 32-bit words
// in the host's order, in hex, a colon, and the port in hex.
func procAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	raw, herr := hex.DecodeString(a)
	if !ok || err != nil || herr != nil || len(raw) != 4 && len(raw) != 16 {
		return netip.AddrPort{}, fmt.Errorf("an address %q", s)
	}
	for i := 0; i < len(raw); i += 4 { // each word to network order
		binary.BigEndian.PutUint32(raw[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}
