package readme

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// docs/cli.md says what bin/tk-image links and what a CGO_ENABLED=0 build
// of it is; both are checked on the binaries, as a reader would check them
// (ldd, then the static build's answer to update --repository): the page
// once called tk-image a static binary while make build linked libgit2.
func TestCLILinkage(t *testing.T) {
	root, cli := read(t, "docs", "cli.md")
	_, intro, _ := strings.Cut(cli, "\n\n") // after the title
	intro, _, _ = strings.Cut(intro, "\n\n")
	intro = strings.Join(strings.Fields(intro), " ")
	// The claim, and the library each name stands for in ldd's list.
	libs := map[string]string{"libgit2 1.5": "libgit2.so.1.5", "mbedTLS": "libmbedtls.so", "libssh2": "libssh2.so", "GSSAPI": "libgssapi_krb5.so"}
	for _, claim := range []string{"`ldd bin/tk-image`", "`CGO_ENABLED=0 go build ./tk-image` is a static binary"} {
		if !strings.Contains(intro, claim) {
			t.Fatalf("docs/cli.md's opening no longer says %s: update this test with it\n%s", claim, intro)
		}
	}
	bin := filepath.Join(localenv.BinDir(root), "tk-image")
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("ldd %s: %v\n%s", bin, err, out)
	}
	for name, lib := range libs {
		if !strings.Contains(intro, name) {
			t.Errorf("docs/cli.md does not name %s", name)
		}
		if !strings.Contains(string(out), lib) {
			t.Errorf("docs/cli.md says bin/tk-image links %s; ldd lists no %s:\n%s", name, lib, out)
		}
	}

	static := filepath.Join(t.TempDir(), "tk-image")
	// -trimpath as make lint's CGO_ENABLED=0 build: this one reuses its
	// compile of every dependency instead of making its own.
	build := exec.Command("go", "build", "-trimpath", "-o", static, "./tk-image")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./tk-image: %v\n%s", err, b)
	}
	if why := notStatic(static); why != "" {
		t.Errorf("the CGO_ENABLED=0 build %s: not static", why)
	}
	cmd := exec.Command(static, "update", "--repository", "https://git.example.com/fleet.git",
		"--policy", "apps:web=ghcr.io/acme/web:1.0.0", "--author-email", "bot@example.com")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "built without cgo") || !strings.Contains(string(b), "libgit2") {
		t.Errorf("the static build's update --repository: %v\n%s\nwant a refusal that says it was built without cgo and needs libgit2", err, b)
	}
}

// make build compiles every binary with cgo on (one compile of their
// dependencies); the reflector and the automation controller import no C
// and must still be static, as their images hold no C library.
func TestBuiltControllersAreStatic(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"image-reflector-controller", "image-automation-controller"} {
		bin := filepath.Join(localenv.BinDir(root), name)
		if _, err := os.Stat(bin); err != nil {
			testenv.Missing(t, bin, "build")
		}
		if why := notStatic(bin); why != "" {
			t.Errorf("bin/%s %s: not static", name, why)
		}
	}
}

// notStatic says why the executable at path is not static, or "".
func notStatic(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if needed, err := f.ImportedLibraries(); err != nil || len(needed) > 0 {
		return fmt.Sprintf("needs %v (%v)", needed, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "names a dynamic loader"
		}
	}
	return ""
}
