package dashboard

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// The real Flux CLI installs tk-image from a catalog served here, built by
// the release script (tk-image/plugin/archives.sh, as make plugin-archives
// runs it), verifies its checksum, and runs it as flux tk-image against a
// real API server: commands, help and completion.
func TestFluxPluginInstall(t *testing.T) {
	flux := filepath.Join(binDir(t), "flux")
	if _, err := os.Stat(flux); err != nil {
		testenv.Missing(t, flux, "flux-tools")
	}
	root := repoRoot(t)
	catalog := t.TempDir()
	srv := httptest.NewServer(http.FileServer(http.Dir(catalog)))
	t.Cleanup(srv.Close)
	build := exec.Command(filepath.Join(root, "tk-image", "plugin", "archives.sh"), "0.1.0-test", srv.URL, catalog)
	build.Env = append(os.Environ(), "PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("archives.sh: %v\n%s", err, out)
	}
	manifest, err := os.ReadFile(filepath.Join(catalog, "tk-image.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The same plugin with a checksum that does not match its archive.
	bad := strings.Replace(strings.Replace(string(manifest), "name: tk-image", "name: tk-image-bad", 1), "checksum: sha256:", "checksum: sha256:0", 1)
	if err := os.WriteFile(filepath.Join(catalog, "tk-image-bad.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}

	cluster, err := localenv.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	ctx := mustContext(t, 5*time.Minute)
	p := &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "podinfo"},
		Spec: imagev1.ImagePolicySpec{Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: "6.x"}}}}
	p.Spec.ImageRepositoryRef.Name = "podinfo"
	if err := cluster.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	plugins := t.TempDir()
	env := append(os.Environ(), "FLUXCD_PLUGINS="+plugins, "FLUXCD_PLUGIN_CATALOG="+srv.URL+"/", "HOME="+t.TempDir())
	run := func(wantOK bool, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, flux, args...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if (err == nil) != wantOK {
			t.Fatalf("flux %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	expect := func(out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("output lacks %q:\n%s", w, out)
			}
		}
	}

	expect(run(false, "plugin", "install", "tk-image-bad"), "checksum verification failed")
	expect(run(true, "plugin", "install", "tk-image"), "tk-image", "0.1.0-test")
	if _, err := os.Stat(filepath.Join(plugins, "flux-tk-image")); err != nil {
		t.Fatalf("flux-tk-image is not in FLUXCD_PLUGINS: %v", err)
	}
	expect(run(true, "plugin", "list"), "tk-image", "0.1.0-test")
	expect(run(true, "tk-image", "get", "policies", "--kubeconfig", cluster.Kubeconfig, "-n", "default"), "podinfo")
	expect(run(true, "tk-image", "dashboard", "--help"), "Usage:\n  flux tk-image dashboard [flags]", "--read-only", "--no-browser")
	expect(run(true, "tk-image", "--help"), "flux tk-image [command]")
	expect(run(true, "tk-image", "version"), "tk-image 0.1.0-test")
	// flux completes a plugin's arguments by running it with cobra's
	// __complete.
	expect(run(true, "__complete", "tk-image", "get", ""), "policy\n", "automation\n")
}
