// Package images checks the image tarballs of `make images` the way a
// container runtime would use them: unpack the layers into a root file
// system and run the entrypoint in it, as the image's user.
package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/imagebuild"
)

// images returns the directory of the image tarballs: those of `make
// images` ($IMAGE_TOOLKIT_BIN/images), or images built here from fresh
// binaries of this tree.
func images(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("IMAGE_TOOLKIT_BIN"); d != "" {
		return filepath.Join(d, "images")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, out := t.TempDir(), t.TempDir()
	built := map[string]bool{}
	for _, s := range imagebuild.Specs {
		b := s.BinaryName()
		if built[b] { // image-update is tk-image's binary again
			continue
		}
		built[b] = true
		// As `make build`: cgo on, the pure-Go net and os/user, so that
		// only the libgit2 binaries link C.
		cmd := exec.Command("go", "build", "-trimpath", "-tags=netgo,osusergo", "-ldflags", "-X toolkit.dev/image-toolkit/pkg/version.Version="+testVersion,
			"-o", filepath.Join(bin, b), "./"+b)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", b, err, out)
		}
	}
	cache := os.Getenv("IMAGE_TOOLKIT_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "image-toolkit")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := imagebuild.Build(ctx, imagebuild.Options{BinDir: bin, OutDir: out, CacheDir: cache,
		Repository: "example.com/test", Version: testVersion, Log: testWriter{t}}, imagebuild.Specs); err != nil {
		t.Fatal(err)
	}
	return out
}

const testVersion = "v0.0.0-test"

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func TestImagesRunTheirBinaryAsNonRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unpacking images with their owners and chroot need root")
	}
	dir := images(t)
	for _, s := range imagebuild.Specs {
		t.Run(s.Name, func(t *testing.T) {
			img, err := tarball.ImageFromPath(filepath.Join(dir, s.Name+".tar"), nil)
			if err != nil {
				t.Fatalf("%v (make images writes them)", err)
			}
			// Manifest, config and sizes agree, as a registry or `docker
			// load` will check; unpack checks each layer's digests.
			if err := validate.Image(img, validate.Fast); err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			uid, gid, err := user(cf.Config.User)
			if err != nil || uid == 0 || gid == 0 {
				t.Fatalf("config user %q: must be a numeric non-root uid:gid (%v)", cf.Config.User, err)
			}
			version := cf.Config.Labels["org.opencontainers.image.version"]
			if version == "" || cf.Config.Labels["org.opencontainers.image.title"] != s.Name {
				t.Errorf("labels %v lack the title %s or a version", cf.Config.Labels, s.Name)
			}
			if want := s.Entrypoint(); !slices.Equal(cf.Config.Entrypoint, want) {
				t.Fatalf("entrypoint %q, want %q", cf.Config.Entrypoint, want)
			}

			rootfs := t.TempDir()
			if err := unpack(img, rootfs); err != nil {
				t.Fatal(err)
			}
			checkRootFS(t, rootfs, uid)

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// The path is resolved inside the chroot: what the image
			// holds, not the host's binary.
			cmd := exec.CommandContext(ctx, cf.Config.Entrypoint[0], s.VersionArgs...)
			cmd.Env = cf.Config.Env
			cmd.Dir = "/"
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs,
				Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s %s in the image: %v\n%s", s.Name, strings.Join(s.VersionArgs, " "), err, out)
			}
			if want := s.BinaryName() + " " + version + " ("; !strings.HasPrefix(string(out), want) {
				t.Errorf("version output %q does not start with %q", out, want)
			}
			if len(s.Debian) > 0 && !strings.Contains(string(out), "libgit2 1.5.") {
				t.Errorf("%s does not report libgit2 1.5: %q", s.Name, out)
			}
			if len(s.Debian) > 0 && !strings.Contains(string(out), "https: true, ssh: true") {
				t.Errorf("%s's libgit2 lacks HTTPS or SSH: %q", s.Name, out)
			}
			if s.Name == "image-update" {
				checkKRMFunction(t, cf, rootfs)
			}
		})
	}
}

// checkKRMFunction runs the image-update image as kpt fn eval --image and
// kustomize's container functions run a function image: `docker run --user
// nobody` (docker looks nobody up in the image's /etc/passwd), its whole
// entrypoint, no arguments, a ResourceList on stdin (kpt reads the files
// with their comments, so the markers are there), the updated ResourceList
// expected on stdout.
func checkKRMFunction(t *testing.T, cf *v1.ConfigFile, rootfs string) {
	t.Helper()
	uid, gid, err := lookupUser(filepath.Join(rootfs, "etc/passwd"), "nobody")
	if err != nil {
		t.Fatalf("kpt and kustomize run functions as nobody: %v", err)
	}
	const in = `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: podinfo
    namespace: apps
  spec:
    template:
      spec:
        containers:
        - name: podinfo
          image: ghcr.io/stefanprodan/podinfo:6.4.0 # {"$imagepolicy": "apps:podinfo"}
        - name: sidecar
          image: docker.io/library/busybox:1.36
functionConfig:
  apiVersion: v1
  kind: ConfigMap
  metadata:
    name: image-update
  data:
    apps:podinfo: ghcr.io/stefanprodan/podinfo:6.5.0
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cf.Config.Entrypoint[0], cf.Config.Entrypoint[1:]...)
	cmd.Env = cf.Config.Env
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(in)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs,
		Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the entrypoint %q as a KRM function: %v\n%s", cf.Config.Entrypoint, err, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		`image: ghcr.io/stefanprodan/podinfo:6.5.0 # {"$imagepolicy": "apps:podinfo"}`,
		"image: docker.io/library/busybox:1.36\n",
		"message: ghcr.io/stefanprodan/podinfo:6.4.0 -> ghcr.io/stefanprodan/podinfo:6.5.0 (apps:podinfo)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the function's output lacks %q:\n%s", want, out)
		}
	}
}

// lookupUser finds name's uid and gid in a passwd file, as docker run
// --user NAME does in the image.
func lookupUser(passwd, name string) (uint32, uint32, error) {
	b, err := os.ReadFile(passwd)
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) >= 4 && f[0] == name {
			return user(f[2] + ":" + f[3])
		}
	}
	return 0, 0, fmt.Errorf("no user %s in the image's /etc/passwd", name)
}

func user(s string) (uint32, uint32, error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("no group")
	}
	uid, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return 0, 0, err
	}
	gid, err := strconv.ParseUint(g, 10, 32)
	return uint32(uid), uint32(gid), err
}

// checkRootFS checks what every image needs besides its binary.
func checkRootFS(t *testing.T, rootfs string, uid uint32) {
	t.Helper()
	passwd, err := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	if err != nil || !strings.Contains(string(passwd), fmt.Sprintf(":x:%d:", uid)) {
		t.Errorf("/etc/passwd has no user %d: %v %q", uid, err, passwd)
	}
	pem, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil {
		t.Error(err)
	} else if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(pem) || len(pem) < 100_000 {
		t.Errorf("ca-certificates.crt holds no usable certificates (%d bytes)", len(pem))
	}
	if st, err := os.Stat(filepath.Join(rootfs, "tmp")); err != nil || st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Errorf("/tmp must be world-writable with the sticky bit: %v", err)
	}
	// Distroless: no shell for an intruder, no package manager.
	for _, p := range []string{"bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/apt", "usr/bin/dpkg"} {
		if _, err := os.Lstat(filepath.Join(rootfs, p)); err == nil {
			t.Errorf("the image holds /%s", p)
		}
	}
}

// unpack extracts the layers in order into dir, as root does: with the
// entries' owners and modes. os.Root keeps every write inside dir whatever
// the layers' symbolic links point to.
func unpack(img v1.Image, dir string) error {
	// The image's user must be able to walk from "/".
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for i, l := range layers {
		if err := unpackVerified(root, l); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return nil
}

// unpackVerified unpacks a gzip layer in one pass that also checks its
// digest and diff ID.
func unpackVerified(root *os.Root, l v1.Layer) error {
	digest, err := l.Digest()
	if err != nil {
		return err
	}
	diffID, err := l.DiffID()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	compressed, uncompressed := sha256.New(), sha256.New()
	// gzip(1) rather than compress/gzip: under -race, Go's inflate is
	// several times slower, and the layers are hundreds of megabytes.
	gz := exec.Command("gzip", "-dc")
	gz.Stdin = io.TeeReader(rc, compressed)
	zr, err := gz.StdoutPipe()
	if err != nil {
		return err
	}
	if err := gz.Start(); err != nil {
		return err
	}
	err = unpackLayer(root, tar.NewReader(io.TeeReader(zr, uncompressed)))
	if err == nil {
		// The rest of the tar stream: its end-of-archive padding.
		_, err = io.Copy(uncompressed, zr)
	}
	if err != nil {
		_ = gz.Process.Kill() // it may be blocked writing what we no longer read
	}
	if werr := gz.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("gzip -dc: %w", werr)
	}
	if err != nil {
		return err
	}
	// Whatever gzip left unread, so that the digest covers the blob.
	if _, err := io.Copy(compressed, rc); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(compressed.Sum(nil)); got != digest.String() {
		return fmt.Errorf("digest %s, manifest says %s", got, digest)
	}
	if got := "sha256:" + hex.EncodeToString(uncompressed.Sum(nil)); got != diffID.String() {
		return fmt.Errorf("diff ID %s, config says %s", got, diffID)
	}
	return nil
}

func unpackLayer(root *os.Root, tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q leaves the root", hdr.Name)
		}
		if strings.HasPrefix(path.Base(name), ".wh.") {
			return fmt.Errorf("%s: whiteouts are not expected in these images", name)
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		mode := os.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, mode); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			if err := root.Link(strings.TrimPrefix(hdr.Linkname, "./"), name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected entry type %q", name, hdr.Typeflag)
		}
		if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeSymlink {
			// Modes as recorded, beyond the umask: setgid, sticky.
			if err := root.Chmod(name, mode|specialBits(hdr.Mode)); err != nil {
				return err
			}
		}
	}
}

// specialBits maps tar's setuid, setgid and sticky bits to Go's.
func specialBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&04000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&02000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&01000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// The Dockerfiles cannot be built here (no container engine); what they
// share with `make images` is checked instead: user, entrypoint, and for
// the cgo binary the Debian packages, which must be libgit2-1.5's whole
// dependency closure less what the distroless cc base already holds.
func TestDockerfilesMatchTheImages(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	inDistrolessCC := map[string]bool{"libc6": true, "libgcc-s1": true, "gcc-12-base": true, "libssl3": true}
	for _, s := range imagebuild.Specs {
		if s.BinaryName() != s.Name {
			// image-update is tk-image's binary with another entrypoint;
			// only `make images` builds it, there is no Dockerfile.
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, s.Name, "Dockerfile"))
		if err != nil {
			t.Error(err)
			continue
		}
		df := string(b)
		for _, want := range []string{"USER " + imagebuild.User + "\n",
			fmt.Sprintf("ENTRYPOINT [%q]\n", path.Join(imagebuild.BinDir, s.Name)),
			`org.opencontainers.image.title="` + s.Name + `"`} {
			if !strings.Contains(df, want) {
				t.Errorf("%s/Dockerfile lacks %q", s.Name, want)
			}
		}
		if len(s.Debian) == 0 {
			continue
		}
		_, download, ok := strings.Cut(df, "apt-get download ")
		download, _, _ = strings.Cut(download, "&&")
		got := strings.Fields(strings.ReplaceAll(download, "\\", " "))
		if !ok || len(got) == 0 {
			t.Errorf("%s/Dockerfile downloads no Debian packages", s.Name)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		closure, err := imagebuild.DebianClosure(ctx, s.Debian...)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, p := range closure {
			if !inDistrolessCC[p] {
				want = append(want, p)
			}
		}
		sort.Strings(got)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s/Dockerfile downloads\n  %s\nbut %s needs (less distroless cc)\n  %s",
				s.Name, strings.Join(got, " "), strings.Join(s.Debian, " "), strings.Join(want, " "))
		}
	}
}
