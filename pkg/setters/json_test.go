package setters

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

const taskDefinition = `{
  "family": "app",
  "containerDefinitions": [
    {
      "name": "app",
      "image": "example.com/app:1.0",
      "essential": true
    },
    {
      "name": "cache",
      "image": "localhost:5000/library/redis:7.0.0",
      "portMappings": [{"containerPort": 6379}]
    }
  ],
  "tags": {"a/b": "5.0.0"}
}
`

// A JSON file is updated at the JSON Pointers update.files names, byte for
// byte but the values (RFC 6901's ~1 for a / in a key); a pointer to no
// value, to a number, or of a policy not applied here, a file that is not
// there, and a file that does not parse are reported, naming the pointer
// or the line, and nothing else is written.
func TestNamedJSONValues(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("task.json", taskDefinition)
	write("broken.json", "{\n  \"image\": \"example.com/app:1.0\",\n}\n")
	named, err := NamedFiles([]meta.FileUpdate{
		{Path: "task.json", Pointer: "/containerDefinitions/0/image", Policy: "apps:numbers"},
		{Path: "task.json", Pointer: "/containerDefinitions/1/image", Policy: "apps:redis"},
		{Path: "task.json", Pointer: "/tags/a~1b", Policy: "apps:podinfo:tag"},
		{Path: "task.json", Pointer: "/containerDefinitions/1/portMappings/0/containerPort", Policy: "apps:numbers"},
		{Path: "task.json", Pointer: "/containerDefinitions/2/image", Policy: "apps:numbers"},
		{Path: "task.json", Pointer: "/family", Policy: "apps:unknown"},
		{Path: "broken.json", Pointer: "/image", Policy: "apps:numbers"},
		{Path: "gone.json", Pointer: "/image", Policy: "apps:numbers"},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := UpdateDir(dir, testPolicies, Options{Named: named})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "task.json"))
	want := strings.NewReplacer("example.com/app:1.0", "example.com/app:1.10",
		"localhost:5000/library/redis:7.0.0", "localhost:5000/library/redis:7.2.4@sha256:2d9a00b3981628a533ff43352193b1838b0a4bf6b0033444286f563205e51a2c",
		`"a/b": "5.0.0"`, `"a/b": "5.0.3"`).Replace(taskDefinition)
	if string(got) != want {
		t.Errorf("task.json:\n%s\nwant:\n%s", got, want)
	}
	if len(res.Files) != 1 || res.Files[0].Path != "task.json" || res.Files[0].Objects[0].Kind != "JSON" || len(res.Files[0].Objects[0].Changes) != 3 {
		t.Errorf("result %+v", res.Files)
	}
	var problems []string
	for _, p := range res.Problems {
		problems = append(problems, p.Error())
	}
	for _, w := range []string{
		"broken.json: line 3: invalid character '}'",
		"gone.json: no such file to set the named values of",
		"task.json: /containerDefinitions/1/portMappings/0/containerPort: the value there is not a string",
		"task.json: /containerDefinitions/2/image: the document has no value there to set for apps:numbers",
		"task.json: /family: no value is given for policy apps:unknown",
	} {
		if !strings.Contains(strings.Join(problems, "\n"), w) {
			t.Errorf("problems\n%s\nlack %q", strings.Join(problems, "\n"), w)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "broken.json")); !strings.Contains(string(b), "app:1.0\"") {
		t.Error("broken.json was written")
	}
	if _, err := NamedFiles([]meta.FileUpdate{{Path: "a.json", Pointer: "/x", Policy: "apps:a"}, {Path: "a.json", Pointer: "/x", Policy: "apps:b"}}); err == nil {
		t.Error("a value named twice was taken")
	}
}
