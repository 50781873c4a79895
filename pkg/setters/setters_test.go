package setters

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

func TestParseImage(t *testing.T) {
	tests := []struct {
		ref     string
		want    meta.ImageRef
		wantErr string
	}{
		{ref: "nginx:1.25", want: meta.ImageRef{Name: "nginx", Tag: "1.25"}},
		{ref: "host:5000/app:1.0", want: meta.ImageRef{Name: "host:5000/app", Tag: "1.0"}},
		{ref: "ghcr.io/org/app:v1@sha256:abc", want: meta.ImageRef{Name: "ghcr.io/org/app", Tag: "v1", Digest: "sha256:abc"}},
		{ref: "https://charts.example.com/podinfo:6.2.0+build.1", want: meta.ImageRef{Name: "https://charts.example.com/podinfo", Tag: "6.2.0+build.1"}},
		{ref: "app:+1", wantErr: "invalid tag"},
		{ref: "host:5000/app", wantErr: "no tag"},
		{ref: "app", wantErr: "no tag"},
		{ref: ":1.0", wantErr: "invalid image name"},
		{ref: "app:", wantErr: "invalid tag"},
		{ref: "app:1.0@", wantErr: "invalid digest"},
		{ref: "app:bad tag", wantErr: "invalid tag"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			got, err := ParseImage(tt.ref)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
			if got.String() != tt.ref {
				t.Errorf("String() = %q, want %q", got.String(), tt.ref)
			}
		})
	}
}

func TestParsePolicyArg(t *testing.T) {
	tests := []struct {
		arg    string
		policy string
		ok     bool
	}{
		{"apps:podinfo=ghcr.io/org/podinfo:1.0", "apps:podinfo", true},
		{"apps:podinfo=host:5000/podinfo:1.0@sha256:abc", "apps:podinfo", true},
		{"podinfo=ghcr.io/org/podinfo:1.0", "", false},
		{"apps:podinfo", "", false},
		{"Apps:podinfo=a:1", "", false},
		{"apps:podinfo=a", "", false},
	}
	for _, tt := range tests {
		policy, _, err := ParsePolicyArg(tt.arg)
		if (err == nil) != tt.ok || policy != tt.policy {
			t.Errorf("ParsePolicyArg(%q) = %q, %v", tt.arg, policy, err)
		}
	}
}

func TestParseMarker(t *testing.T) {
	tests := []struct {
		comment string
		want    Marker
		ok      bool
	}{
		{`# {"$imagepolicy": "apps:podinfo"}`, Marker{Policy: "apps:podinfo"}, true},
		{`#{"$imagepolicy":"apps:podinfo:tag"}  `, Marker{Policy: "apps:podinfo", Field: FieldTag}, true},
		{`# {"$imagepolicy": "apps:podinfo:name"}`, Marker{Policy: "apps:podinfo", Field: FieldName}, true},
		{`# {"$imagepolicy": "apps:podinfo:digest"}`, Marker{Policy: "apps:podinfo", Field: FieldDigest}, true},
		{`# {"$imagepolicy": "apps:podinfo"} trailing`, Marker{}, false},
		{`# note {"$imagepolicy": "apps:podinfo"}`, Marker{}, false},
		{`# {"$imagepolicy": "apps:podinfo", "other": 1}`, Marker{}, false},
		{`# {"$imagepolicy": "apps:podinfo"}{}`, Marker{}, false},
		{`# {"$imagepolicy": "podinfo"}`, Marker{}, false},
		{`# {"$imagepolicy": "apps:podinfo:size"}`, Marker{}, false},
		{`# {"$imagepolicy": "a:b:c:d"}`, Marker{}, false},
		{`# {"$imagepolicy": 1}`, Marker{}, false},
		{`# {"$imagepolicy": "APPS:podinfo"}`, Marker{}, false},
		{`{"$imagepolicy": "apps:podinfo"}`, Marker{}, false},
		{`# {"$imagepolicy": "apps:podinfo"`, Marker{}, false},
	}
	for _, tt := range tests {
		got, ok := parseMarker(tt.comment)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseMarker(%q) = %+v, %v; want %+v, %v", tt.comment, got, ok, tt.want, tt.ok)
		}
	}
}

func TestUpdateBytesShapes(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"multibyte before the value",
			"é€: x\nimage: redis:6 # {\"$imagepolicy\": \"apps:numbers\"}\n",
			"é€: x\nimage: example.com/app:1.10 # {\"$imagepolicy\": \"apps:numbers\"}\n"},
		{"multibyte on the same line",
			"m:\n  é€: redis:6 # {\"$imagepolicy\": \"apps:numbers\"}\n",
			"m:\n  é€: example.com/app:1.10 # {\"$imagepolicy\": \"apps:numbers\"}\n"},
		{"tagged scalar",
			"image: !!str redis:6 # {\"$imagepolicy\": \"apps:numbers\"}\n",
			"image: !!str example.com/app:1.10 # {\"$imagepolicy\": \"apps:numbers\"}\n"},
		{"multi-line plain scalar",
			"image: redis\n  :6 # {\"$imagepolicy\": \"apps:numbers\"}\nnext: 1\n",
			"image: example.com/app:1.10 # {\"$imagepolicy\": \"apps:numbers\"}\nnext: 1\n"},
		{"escapes in double quotes",
			"image: \"re\\\"dis:6\" # {\"$imagepolicy\": \"apps:numbers\"}\n",
			"image: \"example.com/app:1.10\" # {\"$imagepolicy\": \"apps:numbers\"}\n"},
		{"doubled quote in single quotes",
			"image: 'it''s:6' # {\"$imagepolicy\": \"apps:numbers:tag\"}\n",
			"image: '1.10' # {\"$imagepolicy\": \"apps:numbers:tag\"}\n"},
		{"old mac line endings",
			"a: 1\rimage: redis:6 # {\"$imagepolicy\": \"apps:numbers\"}\rb: 2",
			"a: 1\rimage: example.com/app:1.10 # {\"$imagepolicy\": \"apps:numbers\"}\rb: 2"},
		{"head marker under a sequence item",
			"items:\n# {\"$imagepolicy\": \"apps:numbers:tag\"}\n- tag: a\n",
			"items:\n# {\"$imagepolicy\": \"apps:numbers:tag\"}\n- tag: \"1.10\"\n"},
		{"head marker in a single-quoted scalar is text",
			"a: 'x\n  # {\"$imagepolicy\": \"apps:numbers\"}\n  y'\nb: redis:6\n",
			"a: 'x\n  # {\"$imagepolicy\": \"apps:numbers\"}\n  y'\nb: redis:6\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, skipped, err := UpdateBytes([]byte(tt.in), testPolicies)
			if err != nil || len(skipped) > 0 {
				t.Fatalf("err %v, skipped %v", err, skipped)
			}
			if string(out) != tt.want {
				t.Errorf("got\n%q\nwant\n%q", out, tt.want)
			}
		})
	}
}

func TestSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	marked := []byte("image: redis:6 # {\"$imagepolicy\": \"apps:numbers\"}\n")
	write := func(p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, marked, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "secret.yaml"))
	write(filepath.Join(root, "real.yaml"))
	write(filepath.Join(root, ".git", "hidden.yaml"))
	for link, target := range map[string]string{
		"escape.yaml":      filepath.Join(outside, "secret.yaml"),
		"relative-up.yaml": "../" + filepath.Base(outside) + "/secret.yaml",
		"dup.yaml":         "real.yaml",
		"into-git.yaml":    ".git/hidden.yaml",
		"dir-escape":       outside,
		"dangling.yaml":    "nowhere.yaml",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}

	res, err := UpdateDir(root, testPolicies, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range res.Files {
		paths = append(paths, f.Path)
	}
	// real.yaml once (dup.yaml is the same file); into-git.yaml reaches a
	// file inside the root that the walk skipped.
	if strings.Join(paths, ",") != "into-git.yaml,real.yaml" {
		t.Errorf("updated %v", paths)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret.yaml")); string(b) != string(marked) {
		t.Error("a file outside the root was written")
	}
	var problems []string
	for _, p := range res.Problems {
		problems = append(problems, p.Path)
	}
	if strings.Join(problems, ",") != "dangling.yaml,escape.yaml,relative-up.yaml" {
		t.Errorf("problems %v", res.Problems)
	}
	if info, _ := os.Stat(filepath.Join(root, "real.yaml")); info.Mode().Perm() != 0o640 {
		t.Errorf("mode changed to %v", info.Mode())
	}
	if info, _ := os.Lstat(filepath.Join(root, "dup.yaml")); info.Mode()&os.ModeSymlink == 0 {
		t.Error("the symlink was replaced by a file")
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	root := t.TempDir()
	in := []byte("image: redis:6 # {\"$imagepolicy\": \"apps:numbers\"}\n")
	if err := os.WriteFile(filepath.Join(root, "a.yaml"), in, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := UpdateDir(root, testPolicies, Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes()) != 1 {
		t.Errorf("changes = %+v", res.Changes())
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a.yaml")); string(b) != string(in) {
		t.Error("dry run wrote the file")
	}
}

func TestMissingDirIsAnError(t *testing.T) {
	if _, err := UpdateDir(filepath.Join(t.TempDir(), "nope"), testPolicies, Options{}); err == nil {
		t.Error("want an error for a missing directory")
	}
}

// A name is kept as the file writes it when it names the policy's
// repository another way, so that a short Docker Hub name stays short and
// only the tag moves; a name of another repository is replaced whole.
func TestWrittenNamesAreKept(t *testing.T) {
	policies := map[string]meta.ImageRef{
		"apps:busybox": {Name: "docker.io/library/busybox", Tag: "1.37"},
		"apps:moved":   {Name: "ghcr.io/acme/busybox", Tag: "1.37"},
	}
	for in, want := range map[string]string{
		`image: busybox:1.36 # {"$imagepolicy": "apps:busybox"}`:                         `image: busybox:1.37 # {"$imagepolicy": "apps:busybox"}`,
		`image: library/busybox:1.36 # {"$imagepolicy": "apps:busybox"}`:                 `image: library/busybox:1.37 # {"$imagepolicy": "apps:busybox"}`,
		`image: index.docker.io/library/busybox:1.36 # {"$imagepolicy": "apps:busybox"}`: `image: index.docker.io/library/busybox:1.37 # {"$imagepolicy": "apps:busybox"}`,
		`image: busybox:1.36@sha256:0000 # {"$imagepolicy": "apps:busybox"}`:             `image: busybox:1.37 # {"$imagepolicy": "apps:busybox"}`,
		`name: busybox # {"$imagepolicy": "apps:busybox:name"}`:                          `name: busybox # {"$imagepolicy": "apps:busybox:name"}`,
		`image: busybox:1.36 # {"$imagepolicy": "apps:moved"}`:                           `image: ghcr.io/acme/busybox:1.37 # {"$imagepolicy": "apps:moved"}`,
		`name: busybox # {"$imagepolicy": "apps:moved:name"}`:                            `name: ghcr.io/acme/busybox # {"$imagepolicy": "apps:moved:name"}`,
		`image: quay.io/busybox:1.36 # {"$imagepolicy": "apps:busybox"}`:                 `image: docker.io/library/busybox:1.37 # {"$imagepolicy": "apps:busybox"}`,
	} {
		out, _, skipped, err := UpdateBytes([]byte(in+"\n"), policies)
		if err != nil || len(skipped) > 0 {
			t.Fatalf("%s: err %v, skipped %v", in, err, skipped)
		}
		if string(out) != want+"\n" {
			t.Errorf("%s:\ngot  %s\nwant %s", in, out, want)
		}
	}
	if !SameRepository("busybox", "docker.io/library/busybox") || SameRepository("busybox", "quay.io/busybox") ||
		SameRepository("Busybox", "busybox") {
		t.Error("SameRepository: busybox is docker.io/library/busybox and not quay.io/busybox; Busybox is no name")
	}
}
