package statedir

import (
	"os"
	"path/filepath"
)

// recorderFile is where a detaching supervisor leaves a recorder's state.
const recorderFile = "recorder.json"

// SaveRecorder replaces dir's recorder.json with state atomically: a
// recording's recorder state, for the next supervisor.
func SaveRecorder(dir string, state []byte) error {
	return replaceFile(dir, recorderFile, state)
}

// TakeRecorder reads dir's recorder.json and removes it: the state is
// used once, so a supervisor that dies later leaves none.
func TakeRecorder(dir string) ([]byte, error) {
	b, err := readFile(dir, recorderFile, -1)
	if err != nil {
		return nil, err
	}
	os.Remove(filepath.Join(dir, recorderFile))
	return b, nil
}
