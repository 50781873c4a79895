// Package imagebuild assembles the image-toolkit container images without
// a container engine: each image is a base layer (the nonroot user, CA
// certificates, /tmp), for the cgo binary a layer of the Debian bookworm
// shared libraries it needs, taken from Debian's own packages, and the
// binary. The result is what the controllers' Dockerfiles build, written
// as a tarball that `docker load` and `crane push` accept.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user every image runs as: distroless's "nonroot".
const (
	UID  = 65532
	User = "65532:65532"
	Home = "/home/nonroot"
	// BinDir holds the binary; the entrypoint is BinDir/<name>.
	BinDir = "/usr/local/bin"
)

// Spec is one image.
type Spec struct {
	// Name of the image, and of its binary unless Binary says otherwise.
	Name string
	// Binary is the binary in BinDir/<Binary> when it is not Name: one
	// binary can be the entrypoint of several images.
	Binary      string
	Description string
	// Args follow the binary in the entrypoint: an image that always runs
	// one subcommand, as a KRM function image must (kpt and kustomize run
	// it with no arguments, the ResourceList on stdin).
	Args []string
	// Debian packages whose shared libraries (and theirs) the binary
	// loads; empty for static binaries.
	Debian []string
	// Ports the binary listens on by default.
	Ports []string
	// VersionArgs print the version.
	VersionArgs []string
}

// Specs are the images `make images` builds.
var Specs = []Spec{
	{Name: "image-reflector-controller", Description: "Scans image registries and selects the latest image of each ImagePolicy.",
		Ports: []string{"8080/tcp", "8081/tcp"}, VersionArgs: []string{"--version"}},
	{Name: "image-automation-controller", Description: "Creates UpdateJobs that keep image references in git up to date with ImagePolicies.",
		Ports: []string{"8080/tcp", "8081/tcp"}, VersionArgs: []string{"--version"}},
	{Name: "update-job-controller", Description: "Runs UpdateJobs: checks out a git repository, updates image references, commits and pushes.",
		Debian: []string{"libgit2-1.5"}, Ports: []string{"8080/tcp", "8081/tcp"}, VersionArgs: []string{"--version"}},
	// tk-image links libgit2 for update --repository (the write-back
	// engine), like the update-job-controller.
	{Name: "tk-image", Description: "The image-toolkit command line.",
		Debian: []string{"libgit2-1.5"}, VersionArgs: []string{"version"}},
	{Name: "image-update", Binary: "tk-image", Args: []string{"update", "--krm"},
		Description: "The image setters as a KRM function: tk-image update --krm, a ResourceList on stdin and stdout.",
		Debian:      []string{"libgit2-1.5"}, VersionArgs: []string{"version"}},
}

// BinaryName is the binary the image runs.
func (s Spec) BinaryName() string {
	if s.Binary != "" {
		return s.Binary
	}
	return s.Name
}

// Entrypoint is the image's entrypoint: the binary and Args.
func (s Spec) Entrypoint() []string {
	return append([]string{path.Join(BinDir, s.BinaryName())}, s.Args...)
}

// Options configure a build.
type Options struct {
	// BinDir holds the binaries, named as the specs.
	BinDir string
	// OutDir receives <name>.tar.
	OutDir string
	// CacheDir keeps downloaded Debian packages between builds.
	CacheDir string
	// Repository prefixes the image names, e.g. ghcr.io/image-toolkit.
	Repository string
	// Version is the image tag and the org.opencontainers.image.version.
	Version  string
	Revision string
	// Created stamps the config and every file, for reproducible digests;
	// the Unix epoch when zero.
	Created time.Time
	Log     io.Writer
}

// Result describes a written image.
type Result struct {
	Name, Path, Ref string
	Digest          v1.Hash
	// Size is the compressed size of config and layers, as pulled;
	// Unpacked the size of the layers' tar streams.
	Size, Unpacked int64
}

// Build writes an image tarball for each spec.
func Build(ctx context.Context, o Options, specs []Spec) ([]Result, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0)
	}
	o.Created = o.Created.UTC().Truncate(time.Second)
	a, err := newApt(ctx, o.CacheDir, o.Log)
	if err != nil {
		return nil, err
	}
	base, baseSize, err := baseLayer(ctx, a, o.Created)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	var results []Result
	for _, s := range specs {
		r, err := buildOne(ctx, a, o, s, base, baseSize)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name, err)
		}
		results = append(results, r)
	}
	return results, nil
}

func buildOne(ctx context.Context, a *apt, o Options, s Spec, base v1.Layer, baseSize int64) (Result, error) {
	adds := []mutate.Addendum{{Layer: base, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "imagebuild: nonroot user, CA certificates, /tmp",
			Comment: "from Debian bookworm base-files and ca-certificates"}}}
	unpacked := baseSize
	if len(s.Debian) > 0 {
		l, size, pkgs, err := libraryLayer(ctx, a, o.Created, s.Debian)
		if err != nil {
			return Result{}, fmt.Errorf("library layer: %w", err)
		}
		unpacked += size
		adds = append(adds, mutate.Addendum{Layer: l, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "imagebuild: shared libraries of " + strings.Join(s.Debian, ", "),
				Comment: "Debian bookworm packages: " + strings.Join(pkgs, " ")}})
	}
	bin, err := os.ReadFile(filepath.Join(o.BinDir, s.BinaryName()))
	if err != nil {
		return Result{}, err
	}
	t := newTree()
	if err := t.file(path.Join(BinDir, s.BinaryName())[1:], 0o755, bin); err != nil {
		return Result{}, err
	}
	l, size, err := t.layer(o.Created)
	if err != nil {
		return Result{}, err
	}
	unpacked += size
	adds = append(adds, mutate.Addendum{Layer: l, MediaType: types.OCILayer,
		History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "imagebuild: " + path.Join(BinDir, s.BinaryName())}})

	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, adds...)
	if err != nil {
		return Result{}, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Result{}, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: o.Created}
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.User = User
	cf.Config.WorkingDir = "/"
	cf.Config.Entrypoint = s.Entrypoint()
	cf.Config.Env = []string{"PATH=" + BinDir + ":/usr/bin:/bin", "HOME=" + Home,
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	if len(s.Ports) > 0 {
		cf.Config.ExposedPorts = map[string]struct{}{}
		for _, p := range s.Ports {
			cf.Config.ExposedPorts[p] = struct{}{}
		}
	}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       s.Name,
		"org.opencontainers.image.description": s.Description,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
		"org.opencontainers.image.vendor":      "image-toolkit",
	}
	if o.Revision != "" {
		cf.Config.Labels["org.opencontainers.image.revision"] = o.Revision
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return Result{}, err
	}

	ref, err := name.NewTag(o.Repository + "/" + s.Name + ":" + Tag(o.Version))
	if err != nil {
		return Result{}, err
	}
	out := filepath.Join(o.OutDir, s.Name+".tar")
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return Result{}, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return Result{}, err
	}
	r := Result{Name: s.Name, Path: out, Ref: ref.String(), Unpacked: unpacked}
	if r.Digest, err = img.Digest(); err != nil {
		return Result{}, err
	}
	m, err := img.Manifest()
	if err != nil {
		return Result{}, err
	}
	r.Size = m.Config.Size
	for _, l := range m.Layers {
		r.Size += l.Size
	}
	return r, nil
}

var badTagChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Tag makes a version a valid image tag: git describe output is one,
// except for characters such as "+".
func Tag(version string) string {
	t := badTagChars.ReplaceAllString(version, "-")
	if t == "" || t[0] == '.' || t[0] == '-' {
		t = "v" + t
	}
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

// baseLayer is shared by every image: the nonroot user, CA certificates
// from Debian's ca-certificates, os-release from base-files, /tmp.
func baseLayer(ctx context.Context, a *apt, mtime time.Time) (v1.Layer, int64, error) {
	t := newTree()
	files := []struct {
		name, data string
	}{
		// As distroless: nobody too, the user kpt and kustomize run a
		// KRM function image as (docker run --user nobody), which docker
		// must find here.
		{"etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		{"etc/group", "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"},
		// glibc and Go's resolver read it; without it glibc asks DNS
		// before /etc/hosts.
		{"etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n"},
	}
	for _, f := range files {
		if err := t.file(f.name, 0o644, []byte(f.data)); err != nil {
			return nil, 0, err
		}
	}
	if err := t.dir("tmp", 0o1777, 0); err != nil {
		return nil, 0, err
	}
	if err := t.dir(Home[1:], 0o700, UID); err != nil {
		return nil, 0, err
	}
	pkgs, err := packages(ctx, a, "base-files", "ca-certificates")
	if err != nil {
		return nil, 0, err
	}
	var certs []string
	pem := map[string][]byte{}
	for _, p := range pkgs {
		err := walkDeb(ctx, p.deb, func(hdr *tar.Header, r io.Reader) error {
			switch {
			case hdr.Name == "etc/debian_version", hdr.Name == "etc/os-release", hdr.Name == "usr/lib/os-release", isCopyright(hdr.Name):
				return t.copyFrom(hdr, r)
			case strings.HasPrefix(hdr.Name, "usr/share/ca-certificates/mozilla/") && strings.HasSuffix(hdr.Name, ".crt"):
				b, err := io.ReadAll(r)
				pem[hdr.Name] = b
				certs = append(certs, hdr.Name)
				return err
			}
			return nil
		})
		if err != nil {
			return nil, 0, err
		}
		if err := t.file("var/lib/dpkg/status.d/"+p.Name, 0o644, p.control); err != nil {
			return nil, 0, err
		}
	}
	if len(certs) == 0 {
		return nil, 0, fmt.Errorf("ca-certificates has no certificates")
	}
	// What update-ca-certificates makes of the default configuration,
	// which trusts every Mozilla certificate.
	sort.Strings(certs)
	var bundle bytes.Buffer
	for _, c := range certs {
		bundle.Write(bytes.TrimRight(pem[c], "\n"))
		bundle.WriteByte('\n')
	}
	if err := t.file("etc/ssl/certs/ca-certificates.crt", 0o644, bundle.Bytes()); err != nil {
		return nil, 0, err
	}
	return t.layer(mtime)
}

// libraryLayer holds the shared libraries of roots and of everything they
// depend on, as Debian ships them, without programs, documentation (but
// copyright files) or iconv modules (libgit2 converts no charsets on Linux).
func libraryLayer(ctx context.Context, a *apt, mtime time.Time, roots []string) (v1.Layer, int64, []string, error) {
	resolved, err := a.resolve(ctx, roots...)
	if err != nil {
		return nil, 0, nil, err
	}
	var names []string
	for _, p := range resolved {
		names = append(names, p.Name)
	}
	pkgs, err := packages(ctx, a, names...)
	if err != nil {
		return nil, 0, nil, err
	}
	t := newTree()
	var list []string
	for _, p := range pkgs {
		list = append(list, p.Name+"="+p.Version)
		err := walkDeb(ctx, p.deb, func(hdr *tar.Header, r io.Reader) error {
			if isLibrary(hdr.Name) && (hdr.Typeflag != tar.TypeDir) || isCopyright(hdr.Name) {
				return t.copyFrom(hdr, r)
			}
			return nil
		})
		if err != nil {
			return nil, 0, nil, err
		}
		if err := t.file("var/lib/dpkg/status.d/"+p.Name, 0o644, p.control); err != nil {
			return nil, 0, nil, err
		}
	}
	l, size, err := t.layer(mtime)
	return l, size, list, err
}

func isLibrary(name string) bool {
	if strings.Contains(name, "/gconv/") {
		return false
	}
	for _, dir := range []string{"lib/", "lib64/", "usr/lib/"} {
		if strings.HasPrefix(name, dir) {
			return true
		}
	}
	return false
}

func isCopyright(name string) bool {
	return strings.HasPrefix(name, "usr/share/doc/") && strings.HasSuffix(name, "/copyright")
}

type fetched struct {
	*debPackage
	deb     string
	control []byte
}

// packages fetches the named packages (not their dependencies).
func packages(ctx context.Context, a *apt, names ...string) ([]fetched, error) {
	pkgs, err := a.candidates(ctx, names...)
	if err != nil {
		return nil, err
	}
	var out []fetched
	for _, p := range pkgs {
		deb, err := a.fetch(ctx, p)
		if err != nil {
			return nil, err
		}
		c, err := control(ctx, deb)
		if err != nil {
			return nil, err
		}
		out = append(out, fetched{p, deb, c})
	}
	return out, nil
}

// DebianClosure returns the names of roots and of every package they
// depend on, resolved with the host's apt as Build resolves them.
func DebianClosure(ctx context.Context, roots ...string) ([]string, error) {
	a, err := newApt(ctx, "", io.Discard)
	if err != nil {
		return nil, err
	}
	pkgs, err := a.resolve(ctx, roots...)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range pkgs {
		names = append(names, p.Name)
	}
	return names, nil
}
