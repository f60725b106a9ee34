package statedir

import "encoding/json"

// Screen is the file screen: a terminal's screen state kept across a
// planned restart. The detaching supervisor writes the emulator's
// snapshot, which stands for every event up to Seq (the newest evicted
// one), and the next supervisor seeds a fresh emulator with it. After a
// crash there is none; a ring that never evicted needs none.
type Screen struct {
	Seq        uint64 `json:"seq"`
	Rows, Cols int
	Data       []byte `json:"data"`
}

// WriteScreen replaces dir's screen file with sc atomically.
func WriteScreen(dir string, sc Screen) error {
	b, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	return replaceFile(dir, "screen", b)
}

// ReadScreen reads dir's screen file; ok is false when there is none or
// it is unreadable.
func ReadScreen(dir string) (sc Screen, ok bool) {
	b, err := readFile(dir, "screen", -1)
	if err != nil || json.Unmarshal(b, &sc) != nil {
		return Screen{}, false
	}
	return sc, true
}
