package imagebuild

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// debPackage is the candidate version of a Debian package, as apt-cache
// shows it.
type debPackage struct {
	Name, Version, Arch string
	Filename, SHA256    string
	// Depends and Pre-Depends: one list of alternatives per dependency.
	Depends [][]string
}

// parseStanza reads the fields of one control stanza; continuation lines
// are dropped, since no field read here spans lines.
func parseStanza(s string) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if line == "" || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}

// parseDepends splits a Depends value into alternatives, without version
// constraints or architecture qualifiers: "a (>= 1) | b:any, c" is
// [[a b] [c]].
func parseDepends(v string) [][]string {
	var deps [][]string
	for _, dep := range strings.Split(v, ",") {
		var alts []string
		for _, alt := range strings.Split(dep, "|") {
			alt = strings.TrimSpace(alt)
			if i := strings.IndexAny(alt, " (["); i >= 0 {
				alt = alt[:i]
			}
			alt, _, _ = strings.Cut(alt, ":")
			if alt != "" {
				alts = append(alts, alt)
			}
		}
		if len(alts) > 0 {
			deps = append(deps, alts)
		}
	}
	return deps
}

// apt resolves and fetches Debian packages with the host's apt, whose
// sources must be Debian bookworm: the cgo binary links the bookworm
// libgit2 1.5 and must run against bookworm's libraries.
type apt struct {
	arch     string
	cacheDir string
	log      io.Writer
	updated  bool
}

func newApt(ctx context.Context, cacheDir string, log io.Writer) (*apt, error) {
	osRelease, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return nil, fmt.Errorf("the Debian runtime files come from the host's apt: %w", err)
	}
	if f := parseStanza(strings.ReplaceAll(string(osRelease), "=", ":")); strings.Trim(f["VERSION_CODENAME"], `"`) != "bookworm" {
		return nil, fmt.Errorf("the images are assembled from Debian bookworm packages, but this host is %s %s",
			strings.Trim(f["ID"], `"`), strings.Trim(f["VERSION_CODENAME"], `"`))
	}
	out, err := exec.CommandContext(ctx, "dpkg", "--print-architecture").Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg --print-architecture: %w", err)
	}
	return &apt{arch: strings.TrimSpace(string(out)), cacheDir: cacheDir, log: log}, nil
}

// show returns the candidates of the names that are real packages, by
// name; virtual and unknown ones are left out. One apt-cache run for all,
// since each reads the whole package cache.
func (a *apt) show(ctx context.Context, names ...string) (map[string]*debPackage, error) {
	args := []string{"show", "--no-all-versions"}
	for _, n := range names {
		args = append(args, n+":"+a.arch)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "apt-cache", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	pkgs := map[string]*debPackage{}
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "No packages found") {
			return pkgs, nil
		}
		return nil, fmt.Errorf("apt-cache show: %w: %s", err, stderr.Bytes())
	}
	for _, stanza := range strings.Split(stdout.String(), "\n\n") {
		f := parseStanza(stanza)
		if f["Package"] == "" {
			continue
		}
		p := &debPackage{Name: f["Package"], Version: f["Version"], Arch: f["Architecture"],
			Filename: f["Filename"], SHA256: f["SHA256"]}
		if p.Filename == "" || p.SHA256 == "" {
			return nil, fmt.Errorf("apt-cache show %s: no Filename or SHA256", p.Name)
		}
		p.Depends = append(parseDepends(f["Pre-Depends"]), parseDepends(f["Depends"])...)
		pkgs[p.Name] = p
	}
	return pkgs, nil
}

// candidates is show for packages that must exist.
func (a *apt) candidates(ctx context.Context, names ...string) ([]*debPackage, error) {
	got, err := a.show(ctx, names...)
	if err == nil && len(got) < len(names) && !a.updated && os.Geteuid() == 0 {
		// A fresh machine (or a container image) may have no apt lists
		// yet; deps.sh updates them only when it installs something.
		if err = a.update(ctx); err == nil {
			got, err = a.show(ctx, names...)
		}
	}
	if err != nil {
		return nil, err
	}
	var pkgs []*debPackage
	for _, n := range names {
		p, ok := got[n]
		if !ok {
			return nil, fmt.Errorf("no Debian package %s for %s (apt-get update?)", n, a.arch)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// resolve returns roots and everything they depend on, by name. Of
// alternatives the first real package wins, as apt would pick it.
func (a *apt) resolve(ctx context.Context, roots ...string) ([]*debPackage, error) {
	seen := map[string]*debPackage{}
	for want := roots; len(want) > 0; {
		level, err := a.candidates(ctx, want...)
		if err != nil {
			return nil, err
		}
		var alts []string
		for _, p := range level {
			seen[p.Name] = p
			for _, dep := range p.Depends {
				alts = append(alts, dep...)
			}
		}
		real, err := a.show(ctx, alts...)
		if err != nil {
			return nil, err
		}
		queued := map[string]bool{}
		want = nil
		for _, p := range level {
		dep:
			for _, dep := range p.Depends {
				for _, alt := range dep {
					if seen[alt] != nil || queued[alt] {
						continue dep
					}
				}
				for _, alt := range dep {
					if real[alt] != nil {
						want, queued[alt] = append(want, alt), true
						continue dep
					}
				}
				return nil, fmt.Errorf("%s depends on %s: none is a real package", p.Name, strings.Join(dep, " | "))
			}
		}
	}
	pkgs := make([]*debPackage, 0, len(seen))
	for _, p := range seen {
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return pkgs, nil
}

func (a *apt) update(ctx context.Context) error {
	a.updated = true
	fmt.Fprintln(a.log, "apt-get update")
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "apt-get", "update", "-qq").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w: %s", err, out)
	}
	return nil
}

// fetch returns the path of p's .deb in the cache, downloading it with
// apt-get when it is missing; the file's SHA256 is always checked against
// apt's.
func (a *apt) fetch(ctx context.Context, p *debPackage) (string, error) {
	dir := filepath.Join(a.cacheDir, "debian")
	file := filepath.Join(dir, path.Base(p.Filename))
	if err := checkSHA256(file, p.SHA256); err == nil {
		return file, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(a.log, "downloading %s again: %v\n", p.Name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, ".download-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "apt-get", "download", "-qq", p.Name+":"+p.Arch+"="+p.Version)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download %s=%s: %w: %s", p.Name, p.Version, err, out)
	}
	got, err := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if err != nil || len(got) != 1 {
		return "", fmt.Errorf("apt-get download %s: expected one .deb, got %v", p.Name, got)
	}
	if err := checkSHA256(got[0], p.SHA256); err != nil {
		return "", err
	}
	if err := os.Rename(got[0], file); err != nil {
		return "", err
	}
	fmt.Fprintf(a.log, "downloaded %s %s\n", p.Name, p.Version)
	return file, nil
}

func checkSHA256(file, want string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s: sha256 %s, apt says %s", file, got, want)
	}
	return nil
}

// control returns the control file of a .deb, for /var/lib/dpkg/status.d
// where image scanners look for the packages of distroless images.
func control(ctx context.Context, deb string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "dpkg-deb", "--field", deb).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-deb --field %s: %w", deb, err)
	}
	return out, nil
}

// walkDeb calls fn for each entry of a .deb's file system tree, with the
// path made relative ("usr/lib/x") and the content readable from r.
func walkDeb(ctx context.Context, deb string, fn func(hdr *tar.Header, r io.Reader) error) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	walkErr := func() error {
		tr := tar.NewReader(bufio.NewReader(stdout))
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			hdr.Name = strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
			if hdr.Name == "" {
				continue
			}
			if err := fn(hdr, tr); err != nil {
				return err
			}
		}
	}()
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil && walkErr == nil {
		walkErr = fmt.Errorf("%w: %s", err, stderr.Bytes())
	}
	if walkErr != nil {
		return fmt.Errorf("reading %s: %w", filepath.Base(deb), walkErr)
	}
	return nil
}
