package cli

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
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
	repoExport := []string{"create", "repository", "web", "--export"}
	// Clipped: each case appends to it without overwriting another's.
	repoHTTPS := slices.Clip(append(repo, "https://git.example.com/acme/fleet.git"))
	policyExport := []string{"create", "policy", "web", "--export", "--repository", "web"}
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
		// --export writes YAML no API server sees until it is applied: the
		// CLI refuses what the server or the controller would.
		{"an image with capitals", append(repoExport, "--image", "Ghcr.io/Acme/Web"),
			[]string{`--image "Ghcr.io/Acme/Web": want a repository without tag or digest`, "Run 'tk-image create repository --help' for usage."}},
		{"an image with a tag", append(repoExport, "--image", "ghcr.io/acme/web:1.0"),
			[]string{`--image "ghcr.io/acme/web:1.0": want a repository without tag or digest`}},
		{"an image with oci://", append(repoExport, "--image", "oci://ghcr.io/acme/web"),
			[]string{`no oci:// before an image repository, give ghcr.io/acme/web`}},
		{"no scan interval", append(repoExport, "--image", "ghcr.io/acme/web", "--interval", "0s"),
			[]string{`--interval 0s: want a positive duration`}},
		{"an unknown provider", append(repoExport, "--image", "ghcr.io/acme/web", "--provider", "azur"),
			[]string{`--provider "azur": want one of generic, aws, azure, gcp`}},
		{"an exclusion that is no regexp", append(repoExport, "--image", "ghcr.io/acme/web", "--exclude", "(["),
			[]string{`--exclude "([": error parsing regexp`}},
		{"discover --export without a scan interval", []string{"discover", "--dir", ".", "--export", "--interval", "0s"},
			[]string{"--interval 0s: want a positive duration", "Run 'tk-image discover --help' for usage."}},
		{"a name the API refuses", []string{"create", "policy", "Web", "--export", "--repository", "web", "--semver", "*"},
			[]string{`NAME "Web": a lowercase RFC 1123 subdomain`, "Run 'tk-image create policy --help' for usage."}},
		{"a policy without an ordering", policyExport,
			[]string{"give exactly one of --semver, --docker"}},
		{"two orderings", append(policyExport, "--semver", "*", "--docker", "*"),
			[]string{"give exactly one of --semver, --docker", "(given: --semver, --docker)"}},
		{"a range that does not parse", append(policyExport, "--semver", ">=1.x.y"),
			[]string{`--semver ">=1.x.y": improper constraint`}},
		{"a filter that is no regexp, in flag words", append(policyExport, "--semver", "*", "--filter-pattern", "(["),
			[]string{`--filter-pattern "([": error parsing regexp`}},
		{"an empty branch", append(repoHTTPS, "--branch="),
			[]string{"--branch is empty: give the branch to check out", "Run 'tk-image update --help' for usage."}},
		{"a push branch git refuses", append(repoHTTPS, "--push-branch", "bad..name"),
			[]string{`--push-branch "bad..name" is not a valid branch name`}},
		{"a commit template that names no data", append(repoHTTPS, "--commit-template", "{{ .Nope }}"),
			[]string{"--commit-template: invalid commit message template: the template uses .Nope"}},
		{"a pull request on a host no forge is known by", append(repoHTTPS, "--pull-request"),
			[]string{"--pull-request: cannot tell which forge git.example.com is", "--pr-provider"}},
		{"policy eval answers in flag words too", []string{"policy", "eval", "--numerical", "asc", "--filter-extract", "$ts"},
			[]string{"--filter-extract needs --filter-pattern", "Run 'tk-image policy eval --help' for usage."}},
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

// The first hour's path, through the real binary: discover
// --write-markers marks busybox:1.36 for a policy of
// docker.io/library/busybox, and the first update moves only its tag,
// keeping the name as the file writes it (as Renovate does), where it once
// rewrote it to docker.io/library/busybox:1.37.
func TestDiscoveredMarkersKeepTheNameAsWritten(t *testing.T) {
	tk := builtTkImage(t)
	d := t.TempDir()
	file := filepath.Join(d, "deploy.yaml")
	deploy := "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: busybox:1.36\n"
	if err := os.WriteFile(file, []byte(deploy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"discover", "--dir", d, "--write-markers", "-n", "apps"},
		{"update", "--dir", d, "--policy", "apps:busybox=docker.io/library/busybox:1.37"},
	} {
		if out, err := exec.Command(tk, args...).CombinedOutput(); err != nil {
			t.Fatalf("tk-image %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := `image: busybox:1.37 # {"$imagepolicy": "apps:busybox"}`; !strings.Contains(string(b), want) {
		t.Errorf("after discover --write-markers and update, the file lacks %s:\n%s", want, b)
	}
}

// A kubeconfig whose cluster does not answer, and none at all: one line
// each, that names the server and what to check, without client-go's
// klog lines ("memcache.go … Couldn't get current server API group list",
// once per attempt) before it.
func TestUnreachableClusterSaysWhatToDo(t *testing.T) {
	tk := builtTkImage(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	config := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://" + addr + "\"}\ncontexts:\n- name: c\n  context: {cluster: c}\ncurrent-context: c\n"
	if err := os.WriteFile(kc, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		kubeconfig, want string
	}{
		{kc, "cannot reach the Kubernetes API server at https://" + addr + ": "},
		{empty, "no Kubernetes cluster is configured"},
	} {
		for _, args := range [][]string{{"get", "policies"}, {"explain", "automation", "x"}} {
			cmd := exec.Command(tk, append(args, "--kubeconfig", tt.kubeconfig)...)
			cmd.Env = append(os.Environ(), "KUBECONFIG=")
			var errOut bytes.Buffer
			cmd.Stderr = &errOut
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Errorf("tk-image %s: %v, want exit 1", strings.Join(args, " "), err)
			}
			if got := errOut.String(); !strings.Contains(got, tt.want) || strings.Count(got, "\n") != 1 {
				t.Errorf("tk-image %s --kubeconfig %s: stderr\n%s\nwant one line with %q", strings.Join(args, " "), filepath.Base(tt.kubeconfig), got, tt.want)
			}
		}
	}
	// A registry that does not answer is not called an API server.
	out, _ := exec.Command(tk, "policy", "eval", "--semver", "*", "--image", addr+"/acme/web").CombinedOutput()
	if !strings.Contains(string(out), "--image "+addr+"/acme/web: listing its tags: ") || strings.Contains(string(out), "API server") {
		t.Errorf("policy eval against a registry that does not answer:\n%s", out)
	}
}
