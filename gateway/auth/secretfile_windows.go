package auth

import (
	"fmt"
	"os"
)

// checkSecretFile refuses a secret that is not a regular file. Windows
// keeps who may read a file in its ACL, which this does not read, and the
// server, which does check owner and mode, runs on Linux only: on Windows
// only "termgate token" reads a secret, the user's own.
func checkSecretFile(path string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("auth: HS256 secret %s: not a regular file (%v)", path, fi.Mode().Type())
	}
	return nil
}
