package transfer

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type entry struct {
	name, link string
	typ        byte
	body       string
	mode       int64
}

func archive(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// Extract refuses every archive that could write outside its directory,
// or hold what git cannot: each hostile archive fails with a message
// naming the problem, and nothing appears outside the directory.
func TestExtractRefusesHostileArchives(t *testing.T) {
	file := func(name string) entry { return entry{name: name, typ: tar.TypeReg, body: "x"} }
	link := func(name, target string) entry { return entry{name: name, link: target, typ: tar.TypeSymlink} }
	tests := []struct {
		name    string
		entries []entry
		want    string
	}{
		{"absolute name", []entry{file("/etc/passwd")}, "absolute"},
		{"parent in name", []entry{file("../escape")}, `".."`},
		{"parent hidden in the middle", []entry{file("a/../../escape")}, `".."`},
		{"absolute link", []entry{link("l", "/etc")}, "only relative links"},
		{"link out of the tree", []entry{link("a/l", "../../outside")}, "leads out"},
		{"file through a link", []entry{link("l", "sub"), file("l/x")}, "under the symbolic link"},
		{"link chain out", []entry{link("d", "."), link("d/e", "..")}, "under the symbolic link"},
		{"hard link", []entry{file("a"), {name: "b", link: "a", typ: tar.TypeLink}}, "refused"},
		{"device", []entry{{name: "dev", typ: tar.TypeChar}}, "refused"},
		{"fifo", []entry{{name: "fifo", typ: tar.TypeFifo}}, "refused"},
		{"same name twice", []entry{file("a"), file("a")}, "twice"},
		{"empty name", []entry{{name: "./", typ: tar.TypeDir}}, "must name a path"},
		{"backslash", []entry{file(`a\..\..\x`)}, "backslash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "ws")
			err := Extract(archive(t, tt.entries...), dir, 0)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Extract = %v, want an error containing %q", err, tt.want)
			}
			outside, _ := os.ReadDir(base)
			if len(outside) != 1 {
				t.Errorf("something was written beside the directory: %v", outside)
			}
		})
	}
}

// A stream over the cap is refused as ErrTooLarge, whatever its entries.
func TestExtractSizeCap(t *testing.T) {
	big := entry{name: "big", typ: tar.TypeReg, body: strings.Repeat("x", 64<<10)}
	err := Extract(archive(t, big), t.TempDir(), 32<<10)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Extract = %v, want ErrTooLarge", err)
	}
	if err := Extract(archive(t, big), t.TempDir(), 1<<20); err != nil {
		t.Fatalf("under the cap: %v", err)
	}
}

// WriteTar and Extract carry a tree over unchanged: directories, files
// with their executable bit, and links inside the tree; a FIFO is refused
// at the source.
func TestTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "a/b"), 0o755))
	must(os.MkdirAll(filepath.Join(src, "empty"), 0o755))
	must(os.WriteFile(filepath.Join(src, "a/b/f.yaml"), []byte("image: x:1\n"), 0o644))
	must(os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Symlink("a/b/f.yaml", filepath.Join(src, "link")))
	var buf bytes.Buffer
	must(WriteTar(&buf, src))
	dst := filepath.Join(t.TempDir(), "out")
	must(Extract(&buf, dst, 0))
	if b, err := os.ReadFile(filepath.Join(dst, "a/b/f.yaml")); err != nil || string(b) != "image: x:1\n" {
		t.Errorf("a/b/f.yaml = %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("run.sh lost its executable bit: %v %v", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "a/b/f.yaml" {
		t.Errorf("link = %q, %v", target, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty directory: %v %v", fi, err)
	}
	must(mkfifo(filepath.Join(src, "fifo")))
	if err := WriteTar(&bytes.Buffer{}, src); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("WriteTar with a FIFO = %v", err)
	}
}
