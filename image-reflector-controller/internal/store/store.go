// Package store keeps the scanned tags of each ImageRepository on disk, so
// a restarted controller serves policies without scanning again, with when
// each tag was first seen and, once a policy asked, when its image was built.
//
// It is plain files, not a database: one file per repository, a JSON header
// line, one tag per line, then (when the header says "timed") one line of
// times per tag in the same order, "<first seen> <built or ->" in Unix
// seconds; the whole file is replaced atomically (write a temporary file,
// fsync, rename). Tags cannot contain newlines, the files are readable with
// cat, nothing is memory-mapped (bbolt's mmap would count against the
// controller's RSS at a million tags), and a crash leaves either the old
// file or the new one. The header carries the sha256 of the rest, checked
// on every read, and Open removes the files that do not read back whole:
// damage is scanned again, never served.
//
// The times come after the tags, not on their lines, so that a controller
// from before they were recorded reads a file with times as damaged (more
// lines than its count) and scans again, instead of reading "tag time" as a
// tag. Files written before times were recorded read with every tag first
// seen at the file's scan time: the latest time the tag is known to have
// existed, so a minimum age is never met early.
package store

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	// Timed says the file has a line of times per tag after the tags.
	Timed bool `json:"timed,omitempty"`
	// Sum is the sha256 of the file after the header line, checked on
	// read: a file damaged in place with its line count intact (a torn
	// write the file system did not order, a flipped bit) is not served.
	// Files written before it was recorded have none and are not checked.
	Sum string `json:"sum,omitempty"`
	// Tags are excluded from the header and stored one per line.
	Tags []string `json:"-"`
	// Times are the times of Tags[i], when read with the tags; on Put
	// they may be missing or shorter than Tags (see Put).
	Times []Times `json:"-"`
}

// Times are what the store knows of a tag's age.
type Times struct {
	// Seen is when a scan first listed the tag.
	Seen time.Time
	// Created is the image's build time, zero until looked up (or when
	// the image has none).
	Created time.Time
}

// Store is a directory of entries. It is safe for concurrent use.
type Store struct {
	dir string
	// locks serialize the writers of one file: each write reads the old
	// entry, merges and fsyncs. Writers of different files run at once: a
	// cold start of 10,000 repositories is 10,000 fsyncs, which one lock
	// queued behind each other.
	locks [64]sync.Mutex
	// sizeMu guards sizes and total, the file sizes kept for Size, which
	// every scan reports.
	sizeMu sync.Mutex
	sizes  map[string]int64
	total  int64
	// removed are the damaged files Open removed.
	removed []string
	// verdicts are the cached signature verdicts.
	verdicts *Verdicts
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
	s := &Store{dir: dir, sizes: map[string]int64{}, verdicts: openVerdicts(dir)}
	paths, _ := filepath.Glob(filepath.Join(dir, "*"+suffix))
	for _, p := range paths {
		// A file that does not read back whole is removed now: its
		// header alone would tell the repository's reconciler that its
		// scan is fresh while no policy could read its tags, until the
		// next interval. Without it the repository is scanned at once.
		// The name is the hash of the object the header names: a
		// garbled header may still parse.
		if e, err := s.read(p, true); err != nil || s.path(e.Object) != p {
			if os.Remove(p) == nil {
				s.removed = append(s.removed, filepath.Base(p))
			}
			continue
		}
		if info, err := os.Stat(p); err == nil {
			s.setSize(p, info.Size())
		}
	}
	return s, nil
}

// Verdicts is the store's cache of signature verdicts.
func (s *Store) Verdicts() *Verdicts { return s.verdicts }

// Removed names the damaged files Open removed.
func (s *Store) Removed() []string { return s.removed }

func (s *Store) path(object string) string {
	sum := sha256.Sum256([]byte(object))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16])+suffix)
}

// lock locks the writers of object's file; the caller unlocks.
func (s *Store) lock(object string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(object))
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m
}

// setSize records the size of the file at path; -1 forgets it.
func (s *Store) setSize(path string, size int64) {
	s.sizeMu.Lock()
	defer s.sizeMu.Unlock()
	s.total -= s.sizes[path]
	if size < 0 {
		delete(s.sizes, path)
		return
	}
	s.sizes[path] = size
	s.total += size
}

// Put replaces the entry of e.Object. A tag's first sighting is the
// earliest of the stored entry's, e.Times' and e.ScanTime; its build time
// is e.Times' or else the stored one. So a scan records only its own time,
// and a scan shared from another repository brings that one's earlier
// sightings along. It returns e as stored, with those times, so the scan's
// status can name its newest tags without reading the file back.
func (s *Store) Put(e Entry) (Entry, error) {
	for _, t := range e.Tags {
		if strings.ContainsAny(t, "\r\n") {
			return Entry{}, fmt.Errorf("tag %q contains a line break", t)
		}
	}
	defer s.lock(e.Object).Unlock()
	old, err := s.read(s.path(e.Object), true)
	if err != nil || old.Object != e.Object {
		old = Entry{}
	}
	e.Times = merge(e, old)
	return e, s.write(e)
}

// merge returns e's tag times given the stored entry old.
func merge(e, old Entry) []Times {
	out := make([]Times, len(e.Tags))
	prev := lookup(old)
	for i, tag := range e.Tags {
		t := Times{Seen: e.ScanTime}
		if i < len(e.Times) {
			t.Created = e.Times[i].Created
			if s := e.Times[i].Seen; !s.IsZero() && (t.Seen.IsZero() || s.Before(t.Seen)) {
				t.Seen = s
			}
		}
		if o, ok := prev(tag); ok {
			if !o.Seen.IsZero() && (t.Seen.IsZero() || o.Seen.Before(t.Seen)) {
				t.Seen = o.Seen
			}
			if t.Created.IsZero() {
				t.Created = o.Created
			}
		}
		out[i] = t
	}
	return out
}

// lookup finds the times of an entry's tags: by walking along when the
// tags come sorted (as scans store them) and are asked in order, by a map
// otherwise.
func lookup(e Entry) func(tag string) (Times, bool) {
	if len(e.Times) != len(e.Tags) {
		return func(string) (Times, bool) { return Times{}, false }
	}
	sorted := slices.IsSorted(e.Tags)
	var m map[string]Times
	i, last := 0, ""
	return func(tag string) (Times, bool) {
		if m == nil && (!sorted || tag < last) {
			m = make(map[string]Times, len(e.Tags))
			for j, t := range e.Tags {
				m[t] = e.Times[j]
			}
		}
		if m != nil {
			t, ok := m[tag]
			return t, ok
		}
		last = tag
		for i < len(e.Tags) && e.Tags[i] < tag {
			i++
		}
		if i < len(e.Tags) && e.Tags[i] == tag {
			return e.Times[i], true
		}
		return Times{}, false
	}
}

// SetCreated records build times of an object's tags (those it still has),
// keeping everything else.
func (s *Store) SetCreated(object string, created map[string]time.Time) error {
	defer s.lock(object).Unlock()
	e, err := s.read(s.path(object), true)
	if err != nil {
		return err
	}
	if e.Object != object {
		return ErrNotFound
	}
	for i, tag := range e.Tags {
		if c, ok := created[tag]; ok {
			e.Times[i].Created = c
		}
	}
	return s.write(e)
}

// write replaces the file of e.Object with e; the caller holds its lock.
func (s *Store) write(e Entry) error {
	e.Count = len(e.Tags)
	e.Timed = len(e.Times) == len(e.Tags)
	var body bytes.Buffer
	for _, t := range e.Tags {
		body.WriteString(t)
		body.WriteByte('\n')
	}
	if e.Timed {
		for _, t := range e.Times {
			body.WriteString(strconv.FormatInt(t.Seen.Unix(), 10))
			body.WriteByte(' ')
			if t.Created.IsZero() {
				body.WriteByte('-')
			} else {
				body.WriteString(strconv.FormatInt(t.Created.Unix(), 10))
			}
			body.WriteByte('\n')
		}
	}
	sum := sha256.Sum256(body.Bytes())
	e.Sum = "sha256:" + hex.EncodeToString(sum[:])
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(e); err != nil {
		return err
	}
	b.Write(body.Bytes())
	final := s.path(e.Object)
	if err := writeFile(s.dir, final, b.Bytes()); err != nil {
		return err
	}
	s.setSize(final, int64(b.Len()))
	return nil
}

// writeFile replaces final with data atomically: a temporary file in dir,
// synced, renamed over it.
func writeFile(dir, final string, data []byte) error {
	tmp, err := os.CreateTemp(dir, filepath.Base(final)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
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
	return os.Rename(tmp.Name(), final)
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
	h := sha256.New()
	sc := bufio.NewScanner(io.TeeReader(r, h))
	for len(e.Tags) < e.Count && sc.Scan() {
		e.Tags = append(e.Tags, sc.Text())
	}
	if sc.Err() != nil || len(e.Tags) != e.Count {
		return Entry{}, ErrNotFound
	}
	e.Times = make([]Times, e.Count)
	if !e.Timed {
		// Written before times were recorded: each tag existed at the
		// scan, which is all that is known.
		for i := range e.Times {
			e.Times[i].Seen = e.ScanTime
		}
	}
	for i := 0; e.Timed && i < e.Count; i++ {
		if !sc.Scan() {
			return Entry{}, ErrNotFound
		}
		t, ok := parseTimes(sc.Text())
		if !ok {
			return Entry{}, ErrNotFound
		}
		e.Times[i] = t
	}
	if sc.Scan() || sc.Err() != nil {
		return Entry{}, ErrNotFound // more lines than the header says
	}
	// The scanner has read to the end: h has seen the whole body.
	if e.Sum != "" && e.Sum != "sha256:"+hex.EncodeToString(h.Sum(nil)) {
		return Entry{}, ErrNotFound
	}
	return e, nil
}

// parseTimes reads a times line, "<seen> <created or ->".
func parseTimes(line string) (Times, bool) {
	seen, created, ok := strings.Cut(line, " ")
	if !ok {
		return Times{}, false
	}
	s, err := strconv.ParseInt(seen, 10, 64)
	if err != nil {
		return Times{}, false
	}
	t := Times{Seen: time.Unix(s, 0).UTC()}
	if created != "-" {
		c, err := strconv.ParseInt(created, 10, 64)
		if err != nil {
			return Times{}, false
		}
		t.Created = time.Unix(c, 0).UTC()
	}
	return t, true
}

// Delete removes the entry of an object.
func (s *Store) Delete(object string) error {
	p := s.path(object)
	defer s.lock(object).Unlock()
	s.setSize(p, -1)
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
	s.sizeMu.Lock()
	defer s.sizeMu.Unlock()
	return s.total
}
