package transfer

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// DefaultMaxBytes caps a transfer (a checkout, or a container's result) as
// tar bytes on the wire: a job's update path is configuration, and a
// container that writes gigabytes there is broken, not busy.
const DefaultMaxBytes int64 = 256 << 20

// maxEntries caps the entries of one archive, so a stream of empty files
// cannot exhaust inodes before the byte cap is reached.
const maxEntries = 200_000

// ErrTooLarge: the archive is over its byte or entry cap.
var ErrTooLarge = errors.New("the archive is over the transfer's size cap")

// WriteTar writes the tree under dir as a tar stream: directories, regular
// files (with the executable bit as the only mode kept) and symbolic
// links, with slash-separated names relative to dir. Anything else (a
// FIFO, a socket, a device) is an error: git cannot hold it.
func WriteTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: name, Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, name+"/", 0o755
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, target, 0o777
		case fi.Mode().IsRegular():
			hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, fi.Size(), 0o644
			if fi.Mode().Perm()&0o100 != 0 {
				hdr.Mode = 0o755
			}
		default:
			return fmt.Errorf("%s: not a regular file, directory or symbolic link (%s)", name, fi.Mode().Type())
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file that grows while it is written must not corrupt the
		// stream: exactly the announced size is sent.
		if _, err := io.Copy(tw, io.LimitReader(f, hdr.Size)); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// countingReader fails once more than max bytes were read.
type countingReader struct {
	r   io.Reader
	n   int64
	max int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, fmt.Errorf("%w (%d bytes)", ErrTooLarge, c.max)
	}
	return n, err
}

// Extract writes the tar stream r into dir (created if missing), refusing
// what could escape or surprise it: only directories, regular files and
// symbolic links; no absolute names and no ".." in a name; no symbolic
// link whose target is absolute or leads out of dir, and nothing under a
// symbolic link; no name twice; at most
// maxBytes of stream. Files are written through os.Root, so even a link
// made before a file of the same prefix cannot lead a write outside dir.
// On error dir holds a partial tree, for the caller to discard.
func Extract(r io.Reader, dir string, maxBytes int64) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(&countingReader{r: r, max: maxBytes})
	seen := map[string]bool{}
	// A name under a link would be written, or resolved, through it: a
	// link's lexical check holds only where no parent is a link.
	links := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		if len(seen) >= maxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, maxEntries)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("%q: listed twice", hdr.Name)
		}
		seen[name] = true
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if links[p] {
				return fmt.Errorf("%q: is under the symbolic link %q", hdr.Name, p)
			}
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("%q: %w", hdr.Name, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%q: %w", hdr.Name, err)
			}
		case tar.TypeReg:
			mode := os.FileMode(0o644)
			if hdr.Mode&0o100 != 0 {
				mode = 0o755
			}
			if err := writeFile(root, name, tr, mode); err != nil {
				return fmt.Errorf("%q: %w", hdr.Name, err)
			}
		case tar.TypeSymlink:
			if err := checkLink(name, hdr.Linkname); err != nil {
				return err
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fmt.Errorf("%q: %w", hdr.Name, err)
			}
			links[name] = true
		default:
			return fmt.Errorf("%q: entries of type %q are refused: only directories, regular files and symbolic links", hdr.Name, string(hdr.Typeflag))
		}
	}
}

// entryName cleans a tar entry name, refusing one that is absolute or
// climbs with "..", even where cleaning would hide it.
func entryName(raw string) (string, error) {
	name := strings.TrimSuffix(raw, "/")
	name = strings.TrimPrefix(name, "./")
	switch {
	case name == "" || name == ".":
		return "", fmt.Errorf("%q: an entry must name a path inside the workspace", raw)
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("%q: absolute names are refused", raw)
	case strings.ContainsRune(name, 0) || strings.Contains(name, "\\"):
		return "", fmt.Errorf("%q: NUL and backslash are refused in names", raw)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%q: names with \"..\" are refused", raw)
		}
	}
	return path.Clean(name), nil
}

// checkLink refuses a symbolic link at name whose target is absolute or
// resolves, lexically from name's directory, outside the tree.
func checkLink(name, target string) error {
	if target == "" || path.IsAbs(target) {
		return fmt.Errorf("%q: symbolic link to %q: only relative links inside the workspace are allowed", name, target)
	}
	resolved := path.Join(path.Dir(name), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("%q: symbolic link to %q leads out of the workspace", name, target)
	}
	return nil
}

func writeFile(root *os.Root, name string, r io.Reader, mode os.FileMode) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The umask may have dropped bits of mode.
		err = root.Chmod(name, mode)
	}
	return err
}
