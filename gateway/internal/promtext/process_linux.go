package promtext

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"syscall"
)

// WriteProcess writes this process's families, under the names
// Prometheus's process collector uses, from getrusage, getrlimit and
// /proc. A figure that cannot be read is left out.
func WriteProcess(w *Writer) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
		w.One("process_cpu_seconds_total", "User and system CPU time this process has spent, in seconds.", Counter, cpu)
	}
	var nofile, as syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile) == nil {
		w.One("process_max_fds", "The limit on open file descriptors (RLIMIT_NOFILE).", Gauge, float64(nofile.Cur))
	}
	if fds, err := OpenFiles(); err == nil {
		w.One("process_open_fds", "Open file descriptors.", Gauge, float64(fds))
	}
	// The fields of /proc/self/stat after the command's name, which is in
	// parentheses and may hold spaces: state is field 3, starttime 22,
	// vsize 23, rss 24. None when it cannot be read.
	var f [][]byte
	if stat, err := os.ReadFile("/proc/self/stat"); err == nil {
		f = bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
	}
	field := func(n int) (float64, bool) {
		if n-3 >= len(f) {
			return 0, false
		}
		v, err := strconv.ParseUint(string(f[n-3]), 10, 64)
		return float64(v), err == nil
	}
	if rss, ok := field(24); ok {
		w.One("process_resident_memory_bytes", "Resident memory, in bytes.", Gauge, rss*float64(os.Getpagesize()))
	}
	if start, ok := field(22); ok {
		if boot, ok := bootTime(); ok {
			// starttime is in clock ticks since boot; USER_HZ is 100 on
			// every Linux architecture termgate builds for.
			w.One("process_start_time_seconds", "When this process started, in seconds since the Unix epoch.", Gauge, boot+start/100)
		}
	}
	if vsize, ok := field(23); ok {
		w.One("process_virtual_memory_bytes", "Virtual memory, in bytes.", Gauge, vsize)
	}
	if in, out, ok := netOctets(); ok {
		w.One("process_network_receive_bytes_total", "Bytes received by this process's network namespace (IpExt InOctets).", Counter, in)
		w.One("process_network_transmit_bytes_total", "Bytes sent by this process's network namespace (IpExt OutOctets).", Counter, out)
	}
	if syscall.Getrlimit(syscall.RLIMIT_AS, &as) == nil {
		// As Prometheus's Go client writes it: no limit is 2^64-1.
		w.One("process_virtual_memory_max_bytes", "The limit on virtual memory, in bytes (RLIMIT_AS; 2^64-1: none).", Gauge, float64(as.Cur))
	}
}

// OpenFiles counts the process's open descriptors. Since Linux 6.2 the
// size stat gives /proc/self/fd is that count, taken from the descriptor
// table without listing it: 1.3-1.8 ms with 4,000 open becomes about
// 1.5 µs. Older kernels give 0, and then it lists them, a batch at a time
// (a gateway may hold tens of thousands).
func OpenFiles() (int, error) {
	if fi, err := os.Stat("/proc/self/fd"); err == nil && fi.Size() > 0 {
		return int(fi.Size()), nil
	}
	return listFiles()
}

// listFiles counts the entries of /proc/self/fd, less its own descriptor.
func listFiles() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(1024)
		n += len(names)
		switch {
		case err == io.EOF:
			return n - 1, nil // less the directory's own descriptor
		case err != nil:
			return 0, err
		}
	}
}

// netOctets are InOctets and OutOctets of /proc/self/net/netstat's
// IpExt lines: a line of names, then a line of values.
func netOctets() (in, out float64, ok bool) {
	b, err := os.ReadFile("/proc/self/net/netstat")
	if err != nil {
		return 0, 0, false
	}
	var names [][]byte
	for line := range bytes.Lines(b) {
		rest, isIP := bytes.CutPrefix(line, []byte("IpExt:"))
		if !isIP {
			continue
		}
		if names == nil {
			names = bytes.Fields(rest)
			continue
		}
		found := 0
		for i, v := range bytes.Fields(rest) {
			if i >= len(names) {
				break
			}
			n, err := strconv.ParseUint(string(v), 10, 64)
			switch {
			case err != nil:
			case string(names[i]) == "InOctets":
				in, found = float64(n), found+1
			case string(names[i]) == "OutOctets":
				out, found = float64(n), found+1
			}
		}
		return in, out, found == 2
	}
	return 0, 0, false
}

// bootTime is btime of /proc/stat: when the system booted, in seconds
// since the Unix epoch.
func bootTime() (float64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			t, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return float64(t), err == nil
		}
	}
	return 0, false
}
