package setters

import (
	"fmt"
	"slices"
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
		"packer.pkr.hcl": "HCL", "fly.toml": "TOML", "main.tf.json": "JSON", "task.json": "JSON",
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

// Discovery's view of a Dockerfile: the images FROM and COPY --from pull,
// not stages (by name or number) or scratch; the markers written for them
// are comment lines before their instructions, indented and with the
// line's own break, and written once; the values discovered without a
// marker are set in place.
func TestDockerfileDiscovery(t *testing.T) {
	data := []byte("FROM golang:1.26 AS build\r\nFROM build AS test\r\n  FROM example.com/app:1.0\r\nCOPY --from=0 /a /a\r\nCOPY --from=build /b /b\r\nCOPY --from=example.com/assets:2.0 /c /c\r\nFROM scratch\r\n")
	images, err := DockerfileImages(data)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, img := range images {
		got = append(got, fmt.Sprintf("%d:%d %s %s", img.Line, img.Column, img.Instruction, img.Value))
	}
	if want := []string{"1:6 FROM golang:1.26", "3:8 FROM example.com/app:1.0", "6:13 COPY example.com/assets:2.0"}; !slices.Equal(got, want) {
		t.Fatalf("images %q, want %q", got, want)
	}
	sites := []Site{{Line: 6, Column: 13, Marker: Marker{Policy: "apps:numbers"}}, {Line: 3, Column: 8, Marker: Marker{Policy: "apps:numbers", Field: FieldTag}}}
	out, added, skipped, err := AddDockerfileMarkers(data, sites)
	want := "FROM golang:1.26 AS build\r\nFROM build AS test\r\n  # {\"$imagepolicy\": \"apps:numbers:tag\"}\r\n  FROM example.com/app:1.0\r\nCOPY --from=0 /a /a\r\nCOPY --from=build /b /b\r\n# {\"$imagepolicy\": \"apps:numbers\"}\r\nCOPY --from=example.com/assets:2.0 /c /c\r\nFROM scratch\r\n"
	if err != nil || len(added) != 2 || len(skipped) != 0 || string(out) != want {
		t.Fatalf("AddDockerfileMarkers: %q %v %v %v", out, added, skipped, err)
	}
	if again, added, _, err := AddDockerfileMarkers(out, []Site{{Line: 4, Column: 8, Marker: Marker{Policy: "apps:numbers"}}}); err != nil || len(added) != 0 || string(again) != string(out) {
		t.Errorf("marking a marked image again: %q %v %v", again, added, err)
	}
	set, objs, skipped, _, err := updateFormat(&DockerfileFormat, data, testPolicies, nil, sites...)
	if err != nil || len(skipped) != 0 || len(objs) != 1 || len(objs[0].Changes) != 2 ||
		!strings.Contains(string(set), "  FROM example.com/app:1.10\r\n") || !strings.Contains(string(set), "COPY --from=example.com/app:1.10 /c /c") {
		t.Errorf("sites set: %q %v %v %v", set, objs, skipped, err)
	}
}

// HCL nested 5,000 blocks deep, with marked values at the bottom, is
// parsed and set in place: the values change and nothing else; a file cut off inside that nesting is reported with the
// parser's words, not rewritten.
func TestDeeplyNestedHCL(t *testing.T) {
	const depth = 5_000
	var b strings.Builder
	for i := range depth {
		fmt.Fprintf(&b, "%sblock_%d {\n", strings.Repeat(" ", i%8), i)
	}
	b.WriteString("image = \"example.com/app:1.0\" # {\"$imagepolicy\": \"apps:numbers\"}\n")
	b.WriteString("  also = \"example.com/app:1.0\" # {\"$imagepolicy\": \"apps:numbers\"}\n")
	b.WriteString(strings.Repeat("}\n", depth))
	data := []byte(b.String())
	out, objs, skipped, markers, err := updateFormat(&HCLFormat, data, testPolicies, nil)
	if err != nil || len(skipped) != 0 || len(markers) != 2 || len(objs) != 1 {
		t.Fatalf("%d markers, %v, skipped %v, %v", len(markers), objs, skipped, err)
	}
	if want := strings.ReplaceAll(string(data), "example.com/app:1.0\"", "example.com/app:1.10\""); string(out) != want {
		t.Error("more than the two values changed")
	}
	cut := data[:len(data)-depth]
	if out, _, _, _, err := updateFormat(&HCLFormat, cut, testPolicies, nil); err == nil || !strings.Contains(err.Error(), "closing brace") || out != nil {
		t.Errorf("a file cut off inside its blocks: %q, %v", out, err)
	}
}
