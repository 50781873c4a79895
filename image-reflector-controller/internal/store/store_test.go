package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestPutGetDeleteAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	e := Entry{Object: "apps/podinfo", Key: "k1", Revision: "sha256:abc", ScanTime: now, Tags: []string{"1.0.0", "latest", "v2"}}
	if err := s.Put(e); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("apps/other"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing object: %v", err)
	}

	// A new Store on the same directory, as after a restart.
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get("apps/podinfo")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tags, e.Tags) || got.Key != "k1" || got.Revision != e.Revision || !got.ScanTime.Equal(now) {
		t.Errorf("got %+v", got)
	}
	h, err := s2.Header("apps/podinfo")
	if err != nil || h.Tags != nil || h.Count != 3 {
		t.Errorf("header %+v, %v", h, err)
	}
	hs, _ := s2.Headers()
	if len(hs) != 1 || hs[0].Object != "apps/podinfo" {
		t.Errorf("headers %+v", hs)
	}

	if err := s2.Put(Entry{Object: "apps/podinfo", Key: "k2", Tags: nil}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s2.Get("apps/podinfo"); got.Key != "k2" || len(got.Tags) != 0 {
		t.Errorf("replaced entry %+v", got)
	}
	if err := s2.Delete("apps/podinfo"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Get("apps/podinfo"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
	if err := s2.Delete("apps/podinfo"); err != nil {
		t.Errorf("deleting twice: %v", err)
	}
}

func TestDamageReadsAsNotFound(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	if err := s.Put(Entry{Object: "a/b", Tags: []string{"x", "y"}}); err != nil {
		t.Fatal(err)
	}
	p := s.path("a/b")
	data, _ := os.ReadFile(p)
	for name, damaged := range map[string][]byte{
		"truncated":   data[:len(data)-2],
		"no header":   []byte("x\ny\n"),
		"empty":       nil,
		"extra lines": append(append([]byte{}, data...), "z\n"...),
	} {
		if err := os.WriteFile(p, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get("a/b"); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := s.Put(Entry{Object: "a/b", Tags: []string{"bad\ntag"}}); err == nil {
		t.Error("a tag with a newline was stored")
	}
}

func TestOpenRemovesTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	leftover := filepath.Join(dir, "0123.tags.tmp42")
	if err := os.WriteFile(leftover, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Error("temporary file survived Open")
	}
}

// BenchmarkStore: 1,000 repositories of 1,000 tags; reports bytes on disk.
func BenchmarkStore(b *testing.B) {
	s, _ := Open(b.TempDir())
	tags := make([]string, 1000)
	for i := range tags {
		tags[i] = fmt.Sprintf("1.%d.%d-build.%d", i/100, i%100, i)
	}
	for i := range 1000 {
		if err := s.Put(Entry{Object: fmt.Sprintf("ns/repo-%d", i), Tags: tags}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.Get(fmt.Sprintf("ns/repo-%d", i%1000)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	size := s.Size()
	b.ReportMetric(float64(size)/(1<<20), "MiB-on-disk")
}
