package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/signature"
)

func TestPutGetDeleteAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	e := Entry{Object: "apps/podinfo", Key: "k1", Revision: "sha256:abc", ScanTime: now, Tags: []string{"1.0.0", "latest", "v2"}}
	if _, err := s.Put(e); err != nil {
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

	if _, err := s2.Put(Entry{Object: "apps/podinfo", Key: "k2", Tags: nil}); err != nil {
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
	if _, err := s.Put(Entry{Object: "a/b", Tags: []string{"x", "y"}}); err != nil {
		t.Fatal(err)
	}
	p := s.path("a/b")
	data, _ := os.ReadFile(p)
	for name, damaged := range map[string][]byte{
		"truncated":   data[:len(data)-2],
		"no header":   []byte("x\ny\n"),
		"empty":       nil,
		"extra lines": append(append([]byte{}, data...), "z\n"...),
		// Damaged in place, line count intact: only the sum tells.
		"changed tag": bytes.Replace(data, []byte("\ny\n"), []byte("\nz\n"), 1),
	} {
		if err := os.WriteFile(p, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get("a/b"); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := s.Put(Entry{Object: "a/b", Tags: []string{"bad\ntag"}}); err == nil {
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
		if _, err := s.Put(Entry{Object: fmt.Sprintf("ns/repo-%d", i), Tags: tags}); err != nil {
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

// A tag's first sighting survives rescans, restarts and scans shared from
// another repository (the earliest wins); build times set by a policy stay
// until the tag goes; a file written before times were recorded reads with
// every tag seen at its scan time; and a file with times is damaged, not
// misread, when its time lines are missing, extra or garbled.
func TestTimes(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	tests := []struct {
		name  string
		puts  []Entry // in order, all of object a/b
		built map[string]time.Time
		want  map[string]Times
	}{
		{name: "first scan: every tag seen at the scan",
			puts: []Entry{{ScanTime: t0, Tags: []string{"1.0.0", "1.1.0"}}},
			want: map[string]Times{"1.0.0": {Seen: t0}, "1.1.0": {Seen: t0}}},
		{name: "rescan keeps first sightings, dates new tags, forgets removed ones",
			puts: []Entry{{ScanTime: t0, Tags: []string{"1.0.0", "1.1.0"}}, {ScanTime: t0.Add(day), Tags: []string{"1.1.0", "1.2.0"}},
				{ScanTime: t0.Add(2 * day), Tags: []string{"1.0.0", "1.1.0", "1.2.0"}}},
			want: map[string]Times{"1.0.0": {Seen: t0.Add(2 * day)}, "1.1.0": {Seen: t0}, "1.2.0": {Seen: t0.Add(day)}}},
		{name: "unsorted tags merge too",
			puts: []Entry{{ScanTime: t0, Tags: []string{"b", "a", "c"}}, {ScanTime: t0.Add(day), Tags: []string{"c", "d", "a"}}},
			want: map[string]Times{"a": {Seen: t0}, "c": {Seen: t0}, "d": {Seen: t0.Add(day)}}},
		{name: "a shared scan brings earlier sightings, never later ones",
			puts: []Entry{{ScanTime: t0.Add(day), Tags: []string{"1.0.0", "1.1.0"}},
				{ScanTime: t0.Add(2 * day), Tags: []string{"1.0.0", "1.1.0"}, Times: []Times{{Seen: t0}, {Seen: t0.Add(3 * day)}}}},
			want: map[string]Times{"1.0.0": {Seen: t0}, "1.1.0": {Seen: t0.Add(day)}}},
		{name: "build times stay across rescans",
			puts:  []Entry{{ScanTime: t0, Tags: []string{"1.0.0", "1.1.0"}}, {ScanTime: t0.Add(day), Tags: []string{"1.0.0", "1.1.0"}}},
			built: map[string]time.Time{"1.0.0": t0.Add(-day), "gone": t0},
			want:  map[string]Times{"1.0.0": {Seen: t0, Created: t0.Add(-day)}, "1.1.0": {Seen: t0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := Open(t.TempDir())
			for i, e := range tc.puts {
				e.Object = "a/b"
				if _, err := s.Put(e); err != nil {
					t.Fatal(err)
				}
				if i == 0 && tc.built != nil {
					if err := s.SetCreated("a/b", tc.built); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := s.Get("a/b")
			if err != nil {
				t.Fatal(err)
			}
			times := map[string]Times{}
			for i, tag := range got.Tags {
				times[tag] = got.Times[i]
			}
			if len(times) != len(tc.want) {
				t.Errorf("tags %v; want %d", got.Tags, len(tc.want))
			}
			for tag, w := range tc.want {
				if g := times[tag]; !g.Seen.Equal(w.Seen) || !g.Created.Equal(w.Created) {
					t.Errorf("%s: %+v; want %+v", tag, g, w)
				}
			}
		})
	}
}

// A file from before times were recorded reads with every tag seen at its
// scan time, and its next Put keeps that; damaged time lines read as no
// entry.
func TestTimesCompatibility(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	scan := time.Date(2026, 10, 1, 8, 0, 0, 0, time.UTC)
	old := `{"object":"a/b","key":"k","revision":"r","scanTime":"2026-10-01T08:00:00Z","count":2}` + "\n1.0.0\n1.1.0\n"
	p := s.path("a/b")
	if err := os.WriteFile(p, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get("a/b")
	if err != nil || len(e.Times) != 2 || !e.Times[0].Seen.Equal(scan) || !e.Times[1].Seen.Equal(scan) {
		t.Fatalf("old file: %+v, %v", e, err)
	}
	if _, err := s.Put(Entry{Object: "a/b", ScanTime: scan.Add(time.Hour), Tags: []string{"1.0.0", "1.1.0", "1.2.0"}}); err != nil {
		t.Fatal(err)
	}
	e, _ = s.Get("a/b")
	if !e.Timed || !e.Times[0].Seen.Equal(scan) || !e.Times[2].Seen.Equal(scan.Add(time.Hour)) {
		t.Errorf("rewritten: %+v", e)
	}

	data, _ := os.ReadFile(p)
	lines := strings.SplitAfter(string(data), "\n") // header, 3 tags, 3 times, ""
	for name, damaged := range map[string]string{
		"a time line missing": strings.Join(lines[:6], ""),
		"a time line extra":   string(data) + "1 -\n",
		"garbled seen":        strings.Join(lines[:4], "") + "x -\n" + strings.Join(lines[5:], ""),
		"garbled created":     strings.Join(lines[:4], "") + "1 y\n" + strings.Join(lines[5:], ""),
		"no separator":        strings.Join(lines[:4], "") + "1\n" + strings.Join(lines[5:], ""),
	} {
		if err := os.WriteFile(p, []byte(damaged), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get("a/b"); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// What a controller from before times does with a new file: more
	// lines than its count, so it reads as damaged and scans again.
	if n := strings.Count(string(data), "\n") - 1; n == e.Count {
		t.Errorf("an old reader would take %d lines for %d tags", n, e.Count)
	}
}

// TestOpenRemovesDamagedFiles proves that a file damaged while the
// controller was down is removed when the store opens, so its repository is
// scanned again at once instead of its header passing for a fresh scan;
// whole files stay. tests/faults TestKillReflectorDamagedStore is its
// end-to-end form.
func TestOpenRemovesDamagedFiles(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	for _, o := range []string{"a/good", "a/bad"} {
		if _, err := s.Put(Entry{Object: o, Tags: []string{"1.0.0", "1.1.0"}}); err != nil {
			t.Fatal(err)
		}
	}
	bad := s.path("a/bad")
	data, _ := os.ReadFile(bad)
	if err := os.WriteFile(bad, bytes.Replace(data, []byte("1.1.0"), []byte("9.1.0"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	// A header that still parses but names another object.
	if _, err := s.Put(Entry{Object: "a/renamed", Tags: []string{"1.0.0"}}); err != nil {
		t.Fatal(err)
	}
	renamed := s.path("a/renamed")
	data, _ = os.ReadFile(renamed)
	if err := os.WriteFile(renamed, bytes.Replace(data, []byte(`"a/renamed"`), []byte(`"a/xenamed"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bad, renamed} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the damaged file %s survived Open", p)
		}
	}
	if len(s2.Removed()) != 2 {
		t.Errorf("Removed() = %v, want the two damaged files", s2.Removed())
	}
	if e, err := s2.Get("a/good"); err != nil || len(e.Tags) != 2 {
		t.Errorf("the whole file: %+v, %v", e, err)
	}
}

// A verdict is kept per key set and digest across a restart (Open again);
// a damaged cache file is dropped, not trusted.
func TestVerdictsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	v := signature.Verdict{Digest: "sha256:aa", Verified: true, Signer: "key cosign.pub", Format: "bundle"}
	if err := s.Verdicts().Put("keys1", v, time.Unix(100, 0)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Verdicts().Get("keys2", "sha256:aa"); ok {
		t.Error("a verdict of one key set answered for another")
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := s.Verdicts().Get("keys1", "sha256:aa")
	if !ok || !got.Verified || got.Signer != v.Signer || !got.Checked.Equal(time.Unix(100, 0)) {
		t.Fatalf("after a restart: %+v %v", got, ok)
	}
	if err := os.WriteFile(filepath.Join(dir, "verdicts.json"), []byte(`[{"digest": "sha256:aa", "verif`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Verdicts().Len() != 0 {
		t.Error("a damaged verdict cache was read")
	}
}

// Writers of different repositories run at once (a cold start is one
// write per repository), while writers of one repository still merge
// each other's times; Size stays the bytes on disk through puts, rewrites
// and deletes. Run with -race.
func TestConcurrentWritersAndSize(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tags := []string{"1.0.0", "1.1.0", "1.2.0"}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			object := fmt.Sprintf("ns/repo-%d", i%50) // four writers per file
			at := time.Unix(int64(1000+i), 0).UTC()
			if _, err := s.Put(Entry{Object: object, ScanTime: at, Tags: tags[:1+i%3]}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range 10 {
		if err := s.Delete(fmt.Sprintf("ns/repo-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var onDisk int64
	paths, _ := filepath.Glob(filepath.Join(dir, "*"+suffix))
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		onDisk += info.Size()
	}
	if len(paths) != 40 || s.Size() != onDisk {
		t.Errorf("%d files, Size %d, on disk %d; want 40 files and Size = on disk", len(paths), s.Size(), onDisk)
	}
	// Each file is whole, and no writer's sighting was lost: 1.0.0, which
	// every writer listed, was first seen at the earliest writer's scan.
	for i := 10; i < 50; i++ {
		e, err := s.Get(fmt.Sprintf("ns/repo-%d", i))
		if err != nil {
			t.Fatalf("repo-%d: %v", i, err)
		}
		if want := time.Unix(int64(1000+i), 0).UTC(); !e.Times[0].Seen.Equal(want) {
			t.Errorf("repo-%d: %s first seen %s, want %s", i, e.Tags[0], e.Times[0].Seen, want)
		}
	}
	reopened, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if reopened.Size() != onDisk {
		t.Errorf("reopened Size %d, on disk %d", reopened.Size(), onDisk)
	}
}
