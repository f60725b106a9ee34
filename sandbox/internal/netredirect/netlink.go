//go:build linux

package netredirect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// replyTimeout bounds the wait for the kernel's answers on a netlink
// socket: the kernel answers at once, so a wait this long is a fault.
const replyTimeout = 5 * time.Second

// message is one netlink message being built: a header, a fixed part,
// then attributes.
type message struct {
	typ   uint16
	flags uint16
	b     []byte // the fixed part and attributes, without the header
}

// attr appends an attribute of type typ holding data, padded to 4 bytes.
func (m *message) attr(typ uint16, data []byte) {
	m.b = appendAttr(m.b, typ, data)
}

func appendAttr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofRtAttr+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nest appends a nested attribute whose content fill writes.
func nest(b []byte, typ uint16, fill func([]byte) []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = fill(b)
	binary.NativeEndian.PutUint16(b[start:], uint16(len(b)-start))
	binary.NativeEndian.PutUint16(b[start+2:], typ|unix.NLA_F_NESTED)
	return b
}

// str is a NUL-terminated netlink string.
func str(s string) []byte { return append([]byte(s), 0) }

// be32 is a netfilter integer: big-endian.
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// ne32 is a routing integer: the host's order.
func ne32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// encode lays out msgs as one buffer, numbered from seq.
func encode(msgs []message, seq uint32) []byte {
	var out []byte
	for i, m := range msgs {
		out = binary.NativeEndian.AppendUint32(out, uint32(unix.NLMSG_HDRLEN+len(m.b)))
		out = binary.NativeEndian.AppendUint16(out, m.typ)
		out = binary.NativeEndian.AppendUint16(out, m.flags)
		out = binary.NativeEndian.AppendUint32(out, seq+uint32(i))
		out = binary.NativeEndian.AppendUint32(out, 0)
		out = append(out, m.b...)
		for len(out)%4 != 0 {
			out = append(out, 0)
		}
	}
	return out
}

// query sends m, which asks for one object, and returns the attributes
// of the kernel's answer, past its nfgenmsg.
func query(fd int, m message) ([]byte, error) {
	var answer []byte
	_, err := roundTrip(fd, []message{m}, func(typ uint16, data []byte) {
		if typ != unix.NLMSG_ERROR && typ != unix.NLMSG_DONE && answer == nil && len(data) >= 4 {
			answer = append([]byte(nil), data[4:]...)
		}
	})
	if err == nil && answer == nil {
		err = errors.New("netlink: acknowledged without an answer")
	}
	return answer, err
}

// nextSeq numbers the messages sent, so that an answer left over from an
// earlier exchange that gave up waiting is not taken for this one's.
var nextSeq atomic.Uint32

// exchange sends msgs in one datagram on the netlink socket fd and waits
// for an acknowledgement of each message that asked for one, in order
// by sequence number. It returns the first error the kernel gave, with
// the index of the message it answered.
func exchange(fd int, msgs []message) (int, error) {
	return roundTrip(fd, msgs, nil)
}

// roundTrip is exchange, giving every other message answering one of
// msgs to answer (which must not keep its argument) as it comes.
func roundTrip(fd int, msgs []message, answer func(typ uint16, b []byte)) (int, error) {
	tv := unix.NsecToTimeval(replyTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return -1, fmt.Errorf("netlink: set the receive timeout: %w", err)
	}
	seq := nextSeq.Add(uint32(len(msgs)))
	if err := unix.Sendto(fd, encode(msgs, seq), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return -1, fmt.Errorf("netlink: send: %w", err)
	}
	want := map[uint32]bool{}
	for i, m := range msgs {
		if m.flags&unix.NLM_F_ACK != 0 {
			want[seq+uint32(i)] = true
		}
	}
	buf := make([]byte, 64<<10)
	for len(want) > 0 {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("netlink: receive: %w", err)
		}
		for b := buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			size := int(binary.NativeEndian.Uint32(b))
			if size < unix.NLMSG_HDRLEN || size > len(b) {
				return -1, errors.New("netlink: a truncated reply")
			}
			typ, rseq := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint32(b[8:])
			data := b[unix.NLMSG_HDRLEN:size]
			b = b[min((size+3)&^3, len(b)):]
			i := int(rseq - seq)
			if i < 0 || i >= len(msgs) {
				continue
			}
			if typ != unix.NLMSG_ERROR {
				if answer != nil {
					answer(typ, data)
				}
				continue
			}
			if len(data) < 4 {
				continue
			}
			if errno := -int32(binary.NativeEndian.Uint32(data)); errno != 0 {
				return i, unix.Errno(errno) // on any message: a batch's head too
			}
			delete(want, rseq)
		}
	}
	return -1, nil
}
