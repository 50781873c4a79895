package setters

import (
	"strings"
	"testing"
)

// The formats read only their own files, by name; a YAML name stays YAML
// and a document about a Dockerfile is not one.
func TestFormatsTellTheirFiles(t *testing.T) {
	for name, want := range map[string]string{
		"Dockerfile": "Dockerfile", "build/Containerfile": "Dockerfile", "api.Dockerfile": "Dockerfile",
		"Dockerfile.prod": "Dockerfile", "dockerfile": "Dockerfile", ".env": "dotenv", "deploy/.env.production": "dotenv",
		"prod.env": "dotenv", "Dockerfile.yaml": "", "Dockerfile.md": "", "docs/Dockerfile.txt": "", "app.yaml": "",
		"environment": "", "README.md": "", "infra/ecs.tf": "HCL", "main.tofu": "HCL", "prod.tfvars": "HCL",
		"packer.pkr.hcl": "HCL", "fly.toml": "TOML", "main.tf.json": "",
	} {
		got := ""
		if f := FormatOf(name); f != nil {
			got = f.Kind
		}
		if got != want {
			t.Errorf("FormatOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// A file of a format that does not parse is an error, nothing written; a
// value a person holds stays, and is neither changed nor reported; a
// reference whose tag a marker sets but that pins a digest is a skip with
// the reason, since the digest would keep the old image.
func TestFormatsRefuseWhatTheyCannotRewrite(t *testing.T) {
	if _, _, _, _, err := updateFormat(&DockerfileFormat, []byte("# escape=x\nFROM a:1\n"), testPolicies, nil); err == nil ||
		!strings.Contains(err.Error(), "invalid escape token") {
		t.Errorf("a Dockerfile that does not parse: %v", err)
	}
	if _, _, _, _, err := updateFormat(&DockerfileFormat, []byte("RUN <<EOF\nnever ends\n"), testPolicies, nil); err == nil {
		t.Error("an unterminated heredoc parsed")
	}
	data := []byte("# {\"$imagepolicy\": \"apps:numbers\"}\nFROM example.com/app:1.0\n")
	held := func(m MarkerSite, value string) bool { return m.Line == 2 && value == "example.com/app:1.10" }
	out, objs, skipped, markers, err := updateFormat(&DockerfileFormat, data, testPolicies, held)
	if err != nil || string(out) != string(data) || len(objs) != 0 || len(skipped) != 0 || len(markers) != 1 || markers[0].Value != "example.com/app:1.0" {
		t.Errorf("a held value: %q %v %v %+v %v", out, objs, skipped, markers, err)
	}
	pinned := []byte("# {\"$imagepolicy\": \"apps:numbers:tag\"}\nFROM example.com/app:1.0@sha256:2d9a00b3981628a533ff43352193b1838b0a4bf6b0033444286f563205e51a2c\n")
	out, objs, skipped, _, err = updateFormat(&DockerfileFormat, pinned, testPolicies, nil)
	if err != nil || string(out) != string(pinned) || len(objs) != 0 || len(skipped) != 1 || !strings.Contains(skipped[0].Error(), "pins a digest") {
		t.Errorf("a pinned reference: %q %v %v %v", out, objs, skipped, err)
	}
}

// Markers on 100,000 instructions are found and set in one pass.
func TestALargeDockerfile(t *testing.T) {
	var b strings.Builder
	for range 50_000 {
		b.WriteString("# {\"$imagepolicy\": \"apps:numbers\"}\nFROM example.com/app:1.0\n")
	}
	out, objs, _, markers, err := updateFormat(&DockerfileFormat, []byte(b.String()), testPolicies, nil)
	if err != nil || len(markers) != 50_000 || len(objs) != 1 || len(objs[0].Changes) != 50_000 ||
		strings.Count(string(out), "example.com/app:1.10\n") != 50_000 {
		t.Fatalf("%d markers, %v, %v", len(markers), len(objs), err)
	}
}
