package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// tree is the content of one layer: files, directories and symbolic links
// by path relative to the image root. Everything is owned by root unless
// added otherwise, and every time stamp is the build's, so the same inputs
// give the same layer digest.
type tree struct {
	entries map[string]*tar.Header
	data    map[string][]byte
}

func newTree() *tree {
	return &tree{entries: map[string]*tar.Header{}, data: map[string][]byte{}}
}

func (t *tree) file(name string, mode int64, data []byte) error {
	return t.add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data)
}

func (t *tree) dir(name string, mode int64, uid int) error {
	return t.add(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: uid, Gid: uid}, nil)
}

func (t *tree) symlink(name, target string) error {
	return t.add(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, nil)
}

// add adds an entry and any missing parent directories. A directory may be
// added twice (packages share them); anything else only once.
func (t *tree) add(hdr *tar.Header, data []byte) error {
	name := path.Clean(hdr.Name)
	if !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("invalid path %q", hdr.Name)
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
	default:
		return fmt.Errorf("%s: unsupported entry type %q", name, hdr.Typeflag)
	}
	if e, ok := t.entries[name]; ok {
		if e.Typeflag == tar.TypeDir && hdr.Typeflag == tar.TypeDir {
			return nil
		}
		return fmt.Errorf("%s added twice", name)
	}
	var missing []string
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if e, ok := t.entries[dir]; !ok {
			missing = append(missing, dir)
		} else if e.Typeflag != tar.TypeDir {
			return fmt.Errorf("%s: parent %s is not a directory", name, dir)
		}
	}
	for _, dir := range missing {
		t.entries[dir] = &tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755}
	}
	t.entries[name] = &tar.Header{Typeflag: hdr.Typeflag, Name: name, Linkname: hdr.Linkname,
		Mode: hdr.Mode & 0o7777, Uid: hdr.Uid, Gid: hdr.Gid, Size: int64(len(data))}
	if hdr.Typeflag == tar.TypeReg {
		t.data[name] = data
	}
	return nil
}

// copyFrom adds one entry of a package's tar stream; hard links become
// copies of their target, which must already be in the tree.
func (t *tree) copyFrom(hdr *tar.Header, r io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeReg:
		b, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		return t.add(&tar.Header{Typeflag: tar.TypeReg, Name: hdr.Name, Mode: hdr.Mode}, b)
	case tar.TypeLink:
		target := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
		b, ok := t.data[target]
		if !ok {
			return fmt.Errorf("%s: hard link to %s, which is not in the image", hdr.Name, target)
		}
		return t.add(&tar.Header{Typeflag: tar.TypeReg, Name: hdr.Name, Mode: hdr.Mode}, b)
	default:
		// Package files belong to root whatever the build machine's
		// user was; dpkg would install them so.
		return t.add(&tar.Header{Typeflag: hdr.Typeflag, Name: hdr.Name, Linkname: hdr.Linkname, Mode: hdr.Mode}, nil)
	}
}

// tar writes the tree, parents before children.
func (t *tree) tar(mtime time.Time) ([]byte, error) {
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		hdr := *t.entries[n]
		hdr.ModTime = mtime
		hdr.Format = tar.FormatPAX
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(t.data[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layer returns the tree as a gzip-compressed OCI layer and its
// uncompressed size.
func (t *tree) layer(mtime time.Time) (v1.Layer, int64, error) {
	b, err := t.tar(mtime)
	if err != nil {
		return nil, 0, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	return l, int64(len(b)), err
}
