//go:build linux

package sandboxinit

import (
	"errors"
	"strconv"
	"strings"
)

// Config is what the init is told: how to become the command.
type Config struct {
	Env      []string // the command's whole environment, KEY=VALUE
	Cwd      string   // entered before exec
	Terminal bool     // lead a new session with stdin as its controlling terminal
	Hold     bool     // send Ready and wait for Go before exec
	Landlock bool     // put the command in a Landlock domain of its own
	Rlimits  []Rlimit // set with soft = hard just before exec, in order
}

// Rlimit is one ceiling on every process of the command.
type Rlimit struct {
	Resource int
	Value    uint64
}

// MaxConfig bounds an encoded Config: one seqpacket message, which must fit
// the socket's default send buffer (about 208 KiB). The launcher's policy
// bounds (64 KiB of environment, a 4 KiB path) keep every valid one far
// below it.
const MaxConfig = 128 << 10

// The encoding is a NUL-separated list of key and value pairs, in the order
// Encode writes them; env and rlimit repeat. No value holds a NUL: the
// policy refuses them in variables and paths.
const (
	keyCwd      = "cwd"
	keyTerminal = "terminal"
	keyHold     = "hold"
	keyLandlock = "landlock"
	keyRlimit   = "rlimit"
	keyEnv      = "env"
)

// Encode returns the configuration as the init reads it.
func (c Config) Encode() ([]byte, error) {
	var b strings.Builder
	put := func(k, v string) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(v)
		b.WriteByte(0)
	}
	put(keyCwd, c.Cwd)
	put(keyTerminal, strconv.FormatBool(c.Terminal))
	put(keyHold, strconv.FormatBool(c.Hold))
	put(keyLandlock, strconv.FormatBool(c.Landlock))
	for _, r := range c.Rlimits {
		put(keyRlimit, strconv.Itoa(r.Resource)+"="+strconv.FormatUint(r.Value, 10))
	}
	for _, kv := range c.Env {
		put(keyEnv, kv)
	}
	if strings.Count(b.String(), "\x00") != 2*(4+len(c.Rlimits)+len(c.Env)) {
		return nil, errors.New("sandboxinit: a value holds a NUL byte")
	}
	if b.Len() > MaxConfig {
		return nil, errors.New("sandboxinit: configuration is larger than " + strconv.Itoa(MaxConfig) + " bytes")
	}
	return []byte(b.String()), nil
}

// Decode reads what Encode wrote.
func Decode(b []byte) (Config, error) {
	var c Config
	fields := strings.Split(string(b), "\x00")
	if len(fields) == 0 || fields[len(fields)-1] != "" || len(fields)%2 != 1 {
		return c, errors.New("sandboxinit: configuration is not key and value pairs")
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if err := c.set(fields[i], fields[i+1]); err != nil {
			return Config{}, err
		}
	}
	if c.Cwd == "" {
		return Config{}, errors.New("sandboxinit: configuration has no working directory")
	}
	return c, nil
}

func (c *Config) set(k, v string) error {
	var err error
	switch k {
	case keyCwd:
		c.Cwd = v
	case keyTerminal:
		c.Terminal, err = strconv.ParseBool(v)
	case keyHold:
		c.Hold, err = strconv.ParseBool(v)
	case keyLandlock:
		c.Landlock, err = strconv.ParseBool(v)
	case keyRlimit:
		var r Rlimit
		r, err = parseRlimit(v)
		c.Rlimits = append(c.Rlimits, r)
	case keyEnv:
		if !strings.Contains(v, "=") {
			err = errors.New("no '='")
		}
		c.Env = append(c.Env, v)
	default:
		return errors.New("sandboxinit: unknown configuration key " + strconv.Quote(k))
	}
	if err != nil {
		return errors.New("sandboxinit: configuration " + k + " " + strconv.Quote(v) + ": " + err.Error())
	}
	return nil
}

func parseRlimit(v string) (Rlimit, error) {
	res, val, ok := strings.Cut(v, "=")
	if !ok {
		return Rlimit{}, errors.New("want RESOURCE=VALUE")
	}
	r, err := strconv.Atoi(res)
	if err != nil || r < 0 {
		return Rlimit{}, errors.New("bad resource")
	}
	n, err := strconv.ParseUint(val, 10, 64)
	if err != nil {
		return Rlimit{}, errors.New("bad value")
	}
	return Rlimit{Resource: r, Value: n}, nil
}
