package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/tests/internal/localenv"
	"toolkit.dev/image-toolkit/tests/testkit/testenv"
)

// A newcomer's inputs that change nothing, run through the real binary
// offline: each says why on stderr, and a marker the engine cannot follow
// is an error, never "no changes" alone with exit 0.
func TestInputsThatChangeNothingSayWhy(t *testing.T) {
	tk := builtTkImage(t)
	dir := func(files map[string]string) string {
		d := t.TempDir()
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	marked := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n      - name: api\n        image: ghcr.io/acme/api:2.0.0 # {\"$imagepolicy\": \"default:api\"}\n"
	flow := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: api\ndata:\n  values:\n    image: {repository: ghcr.io/acme/api, tag: 2.0.0} # {\"$imagepolicy\": \"default:api:tag\"}\n"
	tests := []struct {
		name   string
		files  map[string]string
		policy string
		code   int
		stderr []string
	}{
		{"a flow-style marker", map[string]string{"values.yaml": flow}, "default:api=ghcr.io/acme/api:2.1.0", 1,
			[]string{"values.yaml: line 7: the marker names default:api:tag", "flow-style mapping", "--expand-flow"}},
		{"a policy no marker names", map[string]string{"d.yaml": marked}, "default:typo=ghcr.io/acme/api:2.1.0", 0,
			[]string{"--policy default:typo=ghcr.io/acme/api:2.1.0: no marker under --dir", "names default:typo; the markers there name default:api"}},
		{"no marker at all", map[string]string{"d.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"}, "default:api=ghcr.io/acme/api:2.1.0", 0,
			[]string{"no $imagepolicy marker under --dir", "tk-image discover --write-markers"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(tk, "update", "--dir", dir(tt.files), "--policy", tt.policy)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			code := 0
			var exit *exec.ExitError
			if err := cmd.Run(); errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out.String(), errOut.String())
			}
			for _, want := range tt.stderr {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
				}
			}
		})
	}
}

// Refusals name the flag the user typed and the value, say what would be
// accepted, and point at the subcommand's help.
func TestRefusalsNameTheFlagAndTheSubcommandsHelp(t *testing.T) {
	tk := builtTkImage(t)
	repo := []string{"update", "--policy", "default:api=ghcr.io/acme/api:2.1.0", "--author-email", "bot@example.com", "--repository"}
	tests := []struct {
		name   string
		args   []string
		stderr []string
	}{
		{"a file:// repository", append(repo, "file:///srv/fleet.git"),
			[]string{`--repository "file:///srv/fleet.git" is a local repository (file://)`, "use --dir", "Run 'tk-image update --help' for usage."}},
		{"a path as the repository", append(repo, "./fleet"),
			[]string{`--repository "./fleet" is a local path`, "https, http or ssh", "Run 'tk-image update --help' for usage."}},
		{"an unknown kind", []string{"get", "widgets"},
			[]string{`unknown kind "widgets"`, "Run 'tk-image get --help' for usage."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(tk, tt.args...)
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			var exit *exec.ExitError
			if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("tk-image %s: %v, want exit 2\n%s", strings.Join(tt.args, " "), err, errOut.String())
			}
			for _, want := range tt.stderr {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
				}
			}
		})
	}
}

// builtTkImage is bin/tk-image as make build left it.
func builtTkImage(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tk := filepath.Join(localenv.BinDir(root), "tk-image")
	if _, err := os.Stat(tk); err != nil {
		t.Fatalf("%v: run make build first", err)
	}
	return tk
}
