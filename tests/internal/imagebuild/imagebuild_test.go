package imagebuild

import (
	"archive/tar"
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseDepends(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [][]string
	}{
		{"", nil},
		{"libc6 (>= 2.34)", [][]string{{"libc6"}}},
		{"openssl (>= 1.1.1), debconf (>= 0.5) | debconf-2.0", [][]string{{"openssl"}, {"debconf", "debconf-2.0"}}},
		{"python3:any, libfoo [amd64]", [][]string{{"python3"}, {"libfoo"}}},
	} {
		if got := parseDepends(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseDepends(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTag(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":                 "v1.2.3",
		"b30c295-dirty":          "b30c295-dirty",
		"v1.0.0+build.1":         "v1.0.0-build.1",
		"":                       "v",
		".hidden":                "v.hidden",
		strings.Repeat("a", 200): strings.Repeat("a", 128),
	} {
		if got := Tag(in); got != want {
			t.Errorf("Tag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTree(t *testing.T) {
	tr := newTree()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tr.file("usr/lib/x/libfoo.so.1.2", 0o644, []byte("elf")))
	must(tr.symlink("usr/lib/x/libfoo.so.1", "libfoo.so.1.2"))
	must(tr.dir("usr/lib", 0o755, 0)) // packages share directories
	must(tr.dir("home/nonroot", 0o700, UID))
	must(tr.copyFrom(&tar.Header{Typeflag: tar.TypeLink, Name: "usr/lib/x/libbar.so", Linkname: "./usr/lib/x/libfoo.so.1.2", Mode: 0o644}, nil))

	for _, bad := range []error{
		tr.file("usr/lib/x/libfoo.so.1.2", 0o644, nil),   // twice
		tr.file("usr/lib/x/libfoo.so.1.2/y", 0o644, nil), // under a file
		tr.file("../etc/passwd", 0o644, nil),
		tr.copyFrom(&tar.Header{Typeflag: tar.TypeChar, Name: "dev/null"}, nil),
		tr.copyFrom(&tar.Header{Typeflag: tar.TypeLink, Name: "a", Linkname: "missing"}, nil),
	} {
		if bad == nil {
			t.Error("a bad entry was accepted")
		}
	}

	mtime := time.Unix(1700000000, 0).UTC()
	b, err := tr.tar(mtime)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	r := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(mtime) {
			t.Errorf("%s: mtime %s", h.Name, h.ModTime)
		}
		got = append(got, h.Name)
		if h.Name == "home/nonroot/" && (h.Uid != UID || h.Mode != 0o700) {
			t.Errorf("home: uid %d mode %o", h.Uid, h.Mode)
		}
		if h.Name == "usr/lib/x/libbar.so" && h.Typeflag != tar.TypeReg {
			t.Errorf("hard link not copied: %q", h.Typeflag)
		}
	}
	want := []string{"home/", "home/nonroot/", "usr/", "usr/lib/", "usr/lib/x/",
		"usr/lib/x/libbar.so", "usr/lib/x/libfoo.so.1", "usr/lib/x/libfoo.so.1.2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("entries %q, want %q", got, want)
	}
	again, _ := tr.tar(mtime)
	if !bytes.Equal(b, again) {
		t.Error("the same tree gave different tars")
	}
}
