package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"syscall"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// A config file (termgate serve --config FILE, or TERMGATE_CONFIG) holds
// serve's flags as TOML: each top-level key is a flag's name, each value
// what the flag takes: a string, durations and sizes as the strings the
// flag takes (integers too where the flag takes a number), booleans as
// booleans, a repeatable flag as an array of strings. Precedence: flag >
// environment > file > default. The envFlags helpers look every flag up
// here, so a flag added later works in the file with no extra code.
//
// go-toml/v2 reads it: its parser reports the line of every key, which
// every error here names; BurntSushi/toml keeps key positions to itself
// (its MetaData has the undecoded keys, without lines).

// maxConfigBytes bounds a config file: a few hundred flags fit in 64 KiB.
const maxConfigBytes = 1 << 20

// configFile is a parsed config file: its values by key, the line of each
// key, and which keys a flag took.
type configFile struct {
	path   string
	values map[string]any
	lines  map[string]int
	used   map[string]bool
}

// tomlKinds is the set of TOML types a flag takes from a config file.
type tomlKinds int

const (
	tomlString tomlKinds = 1 << iota
	tomlInteger
	tomlBoolean
)

func (k tomlKinds) String() string {
	switch k {
	case tomlString:
		return "a string"
	case tomlBoolean:
		return "a boolean"
	case tomlString | tomlInteger:
		return "a string or an integer"
	}
	return fmt.Sprintf("kinds %d", int(k))
}

// loadConfigFile reads and parses the config file at path.
func loadConfigFile(path string) (*configFile, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	return parseConfig(path, data)
}

// parseConfig parses data, the config file at path.
func parseConfig(path string, data []byte) (*configFile, error) {
	c := &configFile{path: path, values: map[string]any{}, lines: keyLines(data), used: map[string]bool{}}
	if err := toml.Unmarshal(data, &c.values); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, fmt.Errorf("config %s:%d: %s", path, row, de.Error())
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// readConfigFile reads path, a regular file of at most maxConfigBytes.
// It names secret files and holds none, so others may read it; but it
// decides whose tokens are accepted and what runs, so one the group or
// others may write, or another user than this one or root owns, is
// refused as a secret file would be.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := checkConfigMode(path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("config %s: larger than %d bytes", path, maxConfigBytes)
	}
	return data, nil
}

// checkConfigMode refuses a config file that is not a regular file, that
// the group or others may write, or that someone else owns.
func checkConfigMode(path string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("config %s: not a regular file (%v)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("config %s: mode %04o lets the group or others write it, and so choose whose tokens are accepted; run chmod go-w %s", path, perm, path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("config %s: cannot tell its owner", path)
	}
	if me := os.Geteuid(); int(st.Uid) != me && st.Uid != 0 {
		return fmt.Errorf("config %s: owned by uid %d, not uid %d (termgate) or root", path, st.Uid, me)
	}
	return nil
}

// keyLines is the line of each top-level key and table in a TOML
// document, for errors; a document that does not parse has fewer
// (toml.Unmarshal reports why).
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	var p unstable.Parser
	p.Reset(data)
	top := true
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.KeyValue && e.Kind != unstable.Table && e.Kind != unstable.ArrayTable {
			continue
		}
		if e.Kind != unstable.KeyValue {
			top = false
		} else if !top {
			continue // a key of a table: the table's line names it
		}
		k := e.Key()
		if !k.Next() {
			continue
		}
		name := string(k.Node().Data)
		if _, seen := lines[name]; !seen {
			lines[name] = p.Shape(k.Node().Raw).Start.Line
		}
	}
	return lines
}

// where is key's place in the file, for errors: "config FILE:LINE: key".
func (c *configFile) where(key string) string {
	if line, ok := c.lines[key]; ok {
		return fmt.Sprintf("config %s:%d: %s", c.path, line, key)
	}
	return fmt.Sprintf("config %s: %s", c.path, key)
}

// scalar is key's value as a flag's text, if the file sets it and its
// type is one of accept; otherwise an error naming the types, never the
// value. A nil file sets nothing.
func (c *configFile) scalar(key string, accept tomlKinds) (string, bool, error) {
	if c == nil {
		return "", false, nil
	}
	v, ok := c.values[key]
	if !ok {
		return "", false, nil
	}
	c.used[key] = true
	switch v := v.(type) {
	case string:
		if accept&tomlString != 0 {
			return v, true, nil
		}
	case int64:
		if accept&tomlInteger != 0 {
			return strconv.FormatInt(v, 10), true, nil
		}
	case bool:
		if accept&tomlBoolean != 0 {
			return strconv.FormatBool(v), true, nil
		}
	}
	return "", false, fmt.Errorf("%s: want %v, got %s", c.where(key), accept, tomlTypeName(v))
}

// list is key's value, an array of strings, if the file sets it.
func (c *configFile) list(key string) ([]string, bool, error) {
	if c == nil {
		return nil, false, nil
	}
	v, ok := c.values[key]
	if !ok {
		return nil, false, nil
	}
	c.used[key] = true
	items, ok := v.([]any)
	list := make([]string, 0, len(items))
	for _, item := range items {
		s, isString := item.(string)
		ok = ok && isString
		list = append(list, s)
	}
	if !ok {
		return nil, false, fmt.Errorf("%s: want an array of strings, got %s", c.where(key), tomlTypeName(v))
	}
	return list, true, nil
}

// tomlTypeName is the TOML type of a decoded value, for errors.
func tomlTypeName(v any) string {
	switch v := v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case map[string]any:
		return "a table"
	case []any:
		for _, item := range v {
			if _, ok := item.(string); !ok {
				return "an array holding " + tomlTypeName(item)
			}
		}
		return "an array"
	}
	return "a date or time"
}

// unknown is an error for each key no flag took, in the file's order:
// a misspelt flag must not be ignored. fs knows the flags a file cannot
// set (--config, --print-config).
func (c *configFile) unknown(isFlag func(string) bool) error {
	if c == nil {
		return nil
	}
	var keys []string
	for k := range c.values {
		if !c.used[k] {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(c.lines[a], c.lines[b]), cmp.Compare(a, b)) })
	var errs []error
	for _, k := range keys {
		if isFlag(k) {
			errs = append(errs, fmt.Errorf("%s: cannot be set in a config file", c.where(k)))
		} else {
			errs = append(errs, fmt.Errorf("%s: unknown key: not a flag of termgate serve (see termgate serve --help)", c.where(k)))
		}
	}
	return errors.Join(errs...)
}
