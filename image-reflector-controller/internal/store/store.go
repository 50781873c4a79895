// Package store keeps the scanned tags of each ImageRepository on disk, so
// a restarted controller serves policies without scanning again.
//
// It is plain files, not a database: one file per repository, a JSON header
// line and then one tag per line, replaced atomically (write a temporary
// file, fsync, rename). Tags cannot contain newlines, the files are
// readable with cat, nothing is memory-mapped (bbolt's mmap would count
// against the controller's RSS at a million tags), and a crash leaves either
// the old file or the new one.
package store

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Entry is the result of one scan of a repository.
type Entry struct {
	// Object is namespace/name of the ImageRepository.
	Object string `json:"object"`
	// Key identifies the scan: image, credentials and options; repositories
	// with the same key can share a scan.
	Key string `json:"key"`
	// Revision is the sha256 of the sorted tag set.
	Revision string `json:"revision"`
	// ScanTime is when the scan finished.
	ScanTime time.Time `json:"scanTime"`
	// Count is the number of tags, checked on read.
	Count int `json:"count"`
	// Excluded is how many listed tags the exclusion list dropped (part of
	// the key, so a shared scan's count holds for every sharer); 0 in files
	// written before it was recorded.
	Excluded int `json:"excluded,omitempty"`
	// Tags are excluded from the header and stored one per line.
	Tags []string `json:"-"`
}

// Store is a directory of entries. It is safe for concurrent use.
type Store struct {
	dir   string
	mu    sync.Mutex       // serializes writers
	sizes map[string]int64 // file sizes, for Size without a directory walk
}

const suffix = ".tags"

// Open opens (creating) the store and removes temporary files a crash left.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp*"))
	for _, t := range tmps {
		_ = os.Remove(t)
	}
	s := &Store{dir: dir, sizes: map[string]int64{}}
	paths, _ := filepath.Glob(filepath.Join(dir, "*"+suffix))
	for _, p := range paths {
		if info, err := os.Stat(p); err == nil {
			s.sizes[p] = info.Size()
		}
	}
	return s, nil
}

func (s *Store) path(object string) string {
	sum := sha256.Sum256([]byte(object))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16])+suffix)
}

// Put replaces the entry of e.Object.
func (s *Store) Put(e Entry) error {
	e.Count = len(e.Tags)
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(e); err != nil {
		return err
	}
	for _, t := range e.Tags {
		if strings.ContainsAny(t, "\r\n") {
			return fmt.Errorf("tag %q contains a line break", t)
		}
		b.WriteString(t)
		b.WriteByte('\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	final := s.path(e.Object)
	tmp, err := os.CreateTemp(s.dir, filepath.Base(final)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return err
	}
	s.sizes[final] = int64(b.Len())
	return nil
}

// ErrNotFound: no entry for the object.
var ErrNotFound = errors.New("no stored tags")

// Get reads the entry of an object. A damaged file reads as ErrNotFound,
// so the repository is scanned again.
func (s *Store) Get(object string) (Entry, error) {
	e, err := s.read(s.path(object), true)
	if err == nil && e.Object != object {
		return Entry{}, ErrNotFound // a hash collision, in theory
	}
	return e, err
}

// Header reads an entry without its tags.
func (s *Store) Header(object string) (Entry, error) {
	e, err := s.read(s.path(object), false)
	if err == nil && e.Object != object {
		return Entry{}, ErrNotFound
	}
	return e, err
}

func (s *Store) read(path string, withTags bool) (Entry, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	head, err := r.ReadBytes('\n')
	if err != nil {
		return Entry{}, ErrNotFound
	}
	var e Entry
	if err := json.Unmarshal(head, &e); err != nil {
		return Entry{}, ErrNotFound
	}
	if !withTags {
		return e, nil
	}
	e.Tags = make([]string, 0, e.Count)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		e.Tags = append(e.Tags, sc.Text())
	}
	if sc.Err() != nil || len(e.Tags) != e.Count {
		return Entry{}, ErrNotFound
	}
	return e, nil
}

// Delete removes the entry of an object.
func (s *Store) Delete(object string) error {
	p := s.path(object)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sizes, p)
	err := os.Remove(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Headers returns every entry's header, e.g. to find fresh scans after a
// restart.
func (s *Store) Headers() ([]Entry, error) {
	paths, err := filepath.Glob(filepath.Join(s.dir, "*"+suffix))
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, p := range paths {
		if e, err := s.read(p, false); err == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// Size returns the bytes the store's files occupy.
func (s *Store) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, v := range s.sizes {
		n += v
	}
	return n
}
