//go:build linux

package keeper

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// argsFile puts args then env, each ended by a NUL, in a sealed memfd:
// a spawn's arguments file, the last of its descriptors, exact to the
// byte whatever the bytes are, and outside the message's bound.
func argsFile(args, env []string) (*os.File, error) {
	var b bytes.Buffer
	for _, list := range [][]string{args, env} {
		for _, a := range list {
			if strings.IndexByte(a, 0) >= 0 {
				return nil, fmt.Errorf("%w: argument or variable %.40q contains a NUL byte", ErrInvalid, a)
			}
			b.WriteString(a)
			b.WriteByte(0)
		}
	}
	fd, err := unix.MemfdCreate("keeper-args", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("keeper: arguments file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "keeper-args")
	_, err = f.Write(b.Bytes())
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("keeper: arguments file: %w", err)
	}
	return f, nil
}

// readArgs reads an arguments file: at most MaxArgBytes of NUL-ended entries,
// the first argc of them the arguments, the rest the environment.
func readArgs(fd, argc int) (args, env []string, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, fmt.Errorf("%w: arguments file: %w", ErrInvalid, err)
	}
	if st.Size > MaxArgBytes {
		return nil, nil, fmt.Errorf("%w: arguments file of %d bytes exceeds %d", ErrInvalid, st.Size, MaxArgBytes)
	}
	b := make([]byte, st.Size)
	for off := 0; off < len(b); {
		n, err := unix.Pread(fd, b[off:], int64(off))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("%w: read the arguments file: %w", ErrInvalid, err)
		case n == 0:
			return nil, nil, fmt.Errorf("%w: arguments file ends at %d of %d bytes", ErrInvalid, off, len(b))
		}
		off += n
	}
	if len(b) > 0 && b[len(b)-1] != 0 {
		return nil, nil, fmt.Errorf("%w: arguments file does not end with a NUL", ErrInvalid)
	}
	var all []string
	for len(b) > 0 && len(all) <= MaxArgs {
		i := bytes.IndexByte(b, 0)
		all = append(all, string(b[:i]))
		b = b[i+1:]
	}
	if len(all) > MaxArgs {
		return nil, nil, fmt.Errorf("%w: more than %d arguments and variables", ErrInvalid, MaxArgs)
	}
	if argc < 0 || argc > len(all) {
		return nil, nil, fmt.Errorf("%w: %d arguments announced, the file holds %d entries", ErrInvalid, argc, len(all))
	}
	return all[:argc], all[argc:], nil
}
