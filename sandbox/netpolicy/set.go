package netpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
)

// A Set is the named policies a server offers, each loaded from its file.
// Reload reads the files again. A Set is safe for use by any number of
// goroutines at once; a nil *Set holds no policy.
type Set struct {
	files map[string]string // name -> path, fixed
	mu    sync.RWMutex
	pols  map[string]*Policy
}

// NewSet loads the policy files, files mapping each policy's name to its
// file's path. Every one must load: the error names each that does not,
// with its line.
func NewSet(files map[string]string) (*Set, error) {
	s := &Set{files: maps.Clone(files), pols: make(map[string]*Policy, len(files))}
	var errs []error
	for _, name := range s.Names() {
		p, err := Load(name, s.files[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.pols[name] = p
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads every policy file again. A policy whose file fails keeps
// its previous rules, and the error names the file and the line at
// fault; the others take their new rules at once. Connections already
// made are not checked again.
func (s *Set) Reload() error {
	if s == nil {
		return nil
	}
	var errs []error
	fresh := make(map[string]*Policy, len(s.files))
	for _, name := range s.Names() {
		p, err := Load(name, s.files[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%w (policy %q keeps its previous rules)", err, name))
			continue
		}
		fresh[name] = p
	}
	s.mu.Lock()
	maps.Copy(s.pols, fresh)
	s.mu.Unlock()
	return errors.Join(errs...)
}

// Lookup is the policy called name, as last loaded.
func (s *Set) Lookup(name string) (*Policy, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.pols[name]
	return p, ok
}

// Names is the names of the set's policies, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.files))
}

// Digest identifies the policies the set holds now: sets with the same
// names and the same rules (as Policy.Digest compares them) have the same
// digest, so that nodes whose policies differ can be told. It is a
// hexadecimal SHA-256; an empty set has one too.
func (s *Set) Digest() string {
	h := sha256.New()
	names := s.Names()
	if s == nil {
		return hex.EncodeToString(h.Sum(nil))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, name := range names {
		s.pols[name].writeCanonical(h)
	}
	return hex.EncodeToString(h.Sum(nil))
}
