package park

// FrameCursor follows the client's WebSocket frames (RFC 6455 section
// 5.2) through the bytes a socket hands the WebSocket's reader, to tell
// when the reader waits for a new message: at the end of a frame, and
// not between the frames of a fragmented message. A read that fails
// there leaves the WebSocket as it was, so an idle connection can give
// its goroutine up although control frames (a ping's pong) woke it: see
// the package doc. It checks nothing; the WebSocket validates the frames.
type FrameCursor struct {
	have      int    // bytes seen of the current frame's header
	need      int    // the header's length, once its second byte is seen
	lengthEnd int    // where the header's length ends: 2, 4 or 10
	length    uint64 // the payload length being read from the header
	payload   uint64 // payload bytes of the current frame still to come
	fin       bool   // the current frame ends its message
	data      bool   // the current frame is a data frame (text, binary, continuation)
	inMessage bool   // a fragmented data message has frames to come
}

// AtRest reports whether the bytes seen end a frame outside a fragmented
// message: the reader's next byte would start a new message or a
// control frame.
func (f *FrameCursor) AtRest() bool {
	return f.have == 0 && f.payload == 0 && !f.inMessage
}

// Feed follows the bytes b, handed out after those fed before.
func (f *FrameCursor) Feed(b []byte) {
	for len(b) > 0 {
		if f.have == 0 && f.payload > 0 {
			k := min(uint64(len(b)), f.payload)
			f.payload -= k
			b = b[k:]
			continue
		}
		f.header(b[0])
		b = b[1:]
	}
}

// header takes the next byte of a frame's header: the flags and opcode,
// the mask bit and 7-bit length, then 0, 2 or 8 bytes of extended length,
// then the masking key when the mask bit is set.
func (f *FrameCursor) header(c byte) {
	switch f.have {
	case 0:
		f.fin, f.data = c&0x80 != 0, c&0x0f <= 2
	case 1:
		f.length, f.lengthEnd = uint64(c&0x7f), 2
		switch f.length {
		case 126:
			f.length, f.lengthEnd = 0, 4
		case 127:
			f.length, f.lengthEnd = 0, 10
		}
		f.need = f.lengthEnd
		if c&0x80 != 0 {
			f.need += 4
		}
	default:
		if f.have < f.lengthEnd {
			f.length = f.length<<8 | uint64(c)
		}
	}
	f.have++
	if f.have >= 2 && f.have == f.need {
		f.have, f.payload = 0, f.length
		if f.data {
			f.inMessage = !f.fin
		}
	}
}
