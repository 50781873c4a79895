package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Images every cluster has, built locally at Start: nothing is pulled.
const (
	// PauseImage is the pod sandbox image containerd's CRI plugin asks
	// for (its sandbox_image); tests/internal/cluster/pause.
	PauseImage = "registry.k8s.io/pause:3.10"
	// BusyboxImage is Debian's busybox-static with a symlink per applet
	// in /bin (sh, wget, cat, id, ...), running as the nonroot user
	// 65532: a shell for script jobs and probes from inside the cluster.
	BusyboxImage = "image-toolkit.test/busybox:1"
	// ImageUID is the user BusyboxImage runs as, as the project's images.
	ImageUID = 65532
)

// busyboxPath is the binary of Debian's busybox-static package.
const busyboxPath = "/bin/busybox"

type file struct {
	name string
	mode int64
	body []byte
	link string
	dir  bool
	uid  int
	gid  int
}

// layer makes a tar layer of files, in order, owned by root unless set.
func layer(files []file) (v1.Layer, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	epoch := time.Unix(0, 0)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag = tar.TypeDir
		case f.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := b.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// writeImage writes a single-layer image tarball tagged ref.
func writeImage(path, ref string, files []file, configure func(*v1.Config)) error {
	l, err := layer(files)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), l)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	configure(&cf.Config)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(path, tag, img)
}

// buildPause compiles the pause command and packs it as PauseImage.
func buildPause(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "pause.tar")
	return out, BuildGoImage(ctx, root, "toolkit.dev/image-toolkit/tests/internal/cluster/pause", PauseImage, out, 65535)
}

// BuildGoImage compiles the Go command pkg (an import path in the
// workspace at root) statically, with the toolchain running the tests,
// and writes an image tarball tagged ref whose entrypoint is that binary,
// running as uid:uid: a test's own probe as an image, in seconds and
// without a registry. Import it with ImportImages.
func BuildGoImage(ctx context.Context, root, pkg, ref, tarballPath string, uid int) error {
	bin := tarballPath + ".bin"
	defer os.Remove(bin)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	base := path.Base(pkg)
	return writeImage(tarballPath, ref, []file{{name: base, mode: 0o755, body: body}}, func(c *v1.Config) {
		c.Entrypoint = []string{"/" + base}
		c.User = fmt.Sprintf("%d:%d", uid, uid)
	})
}

// buildBusybox packs Debian's busybox-static as BusyboxImage.
func buildBusybox(ctx context.Context, dir string) (string, error) {
	body, err := os.ReadFile(busyboxPath)
	if err != nil {
		return "", fmt.Errorf("%w (install Debian's busybox-static: apt-get install busybox-static)", err)
	}
	list, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
	if err != nil {
		return "", fmt.Errorf("%s --list: %w", busyboxPath, err)
	}
	files := []file{
		{name: "bin/", dir: true, mode: 0o755},
		{name: "bin/busybox", mode: 0o755, body: body},
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/bin/sh\n")},
		{name: "etc/group", mode: 0o644, body: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{name: "home/", dir: true, mode: 0o755},
		{name: "home/nonroot/", dir: true, mode: 0o700, uid: ImageUID, gid: ImageUID},
		{name: "tmp/", dir: true, mode: 0o1777},
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			files = append(files, file{name: "bin/" + applet, mode: 0o777, link: "busybox"})
		}
	}
	out := filepath.Join(dir, "busybox.tar")
	return out, writeImage(out, BusyboxImage, files, func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/sh"}
		c.User = fmt.Sprintf("%d:%d", ImageUID, ImageUID)
		c.Env = []string{"PATH=/bin", "HOME=/home/nonroot"}
		c.WorkingDir = "/"
	})
}

// ImportImages imports image tarballs (docker save or OCI layout tar, as
// `make images` writes them) into containerd's k8s.io namespace, where the
// kubelet finds them: pods using them need imagePullPolicy Never or
// IfNotPresent.
func (c *Cluster) ImportImages(ctx context.Context, tarballs ...string) error {
	for _, t := range tarballs {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		out, err := exec.CommandContext(ictx, "ctr", "--address", c.containerdSock, "--namespace", "k8s.io",
			"images", "import", t).CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("importing %s: %w\n%s", t, err, out)
		}
	}
	return nil
}

// ProjectImages lists the tarballs `make images` wrote to root/bin/images,
// and an error naming the target when there are none.
func ProjectImages(root string) ([]string, error) {
	ts, err := filepath.Glob(filepath.Join(root, "bin", "images", "*.tar"))
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("no image tarballs in %s: run make images", filepath.Join(root, "bin", "images"))
	}
	return ts, nil
}

// TarballRefs returns the tags an image tarball (docker save format, as
// `make images` writes) carries: what a pod's image field must name.
func TarballRefs(path string) ([]string, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var refs []string
	for _, d := range m {
		refs = append(refs, d.RepoTags...)
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%s: the image has no tag", path)
	}
	return refs, nil
}
