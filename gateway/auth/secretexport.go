package auth

// ReadSecretFile reads a shared secret (a node secret, for example) with
// the checks the HS256 secret file gets: a regular file that neither group
// nor others may read or write, owned by the effective user or root, of at
// least 32 bytes, one trailing newline trimmed.
func ReadSecretFile(path string) ([]byte, error) { return readSecret(path) }
