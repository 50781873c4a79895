package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --json sets a JSON file's value by its JSON Pointer as a marker would,
// printing the change as for marked files; what it cannot take says which
// flag and value, and what would be accepted (exit 2); a pointer to no
// value is reported with the file and the pointer (exit 1).
func TestUpdateSetsJSONValues(t *testing.T) {
	const task = "{\n  \"containerDefinitions\": [\n    {\"name\": \"app\", \"image\": \"ghcr.io/acme/app:1.0.0\"}\n  ]\n}\n"
	dir := tree(t, map[string]string{"ecs/task.json": task})
	code, out, errs := runCLI(t, "", "update", "--dir", dir, "--json", "ecs/task.json#/containerDefinitions/0/image=apps:app",
		"--policy", "apps:app=ghcr.io/acme/app:1.4.0")
	if code != 0 || errs != "" || !strings.Contains(out, "ecs/task.json\n  JSON\n    ghcr.io/acme/app:1.0.0 -> ghcr.io/acme/app:1.4.0 (apps:app)") {
		t.Errorf("exit %d\n%s\n%s", code, out, errs)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ecs/task.json")); string(b) != strings.Replace(task, "1.0.0", "1.4.0", 1) {
		t.Errorf("task.json:\n%s", b)
	}
	for _, tt := range []struct {
		arg  string
		code int
		errs string
	}{
		{"ecs/task.json/containerDefinitions/0/image=apps:app", 2, `--json "ecs/task.json/containerDefinitions/0/image=apps:app": want FILE#POINTER=NAMESPACE:NAME[:tag|:name|:digest]`},
		{"ecs/task.json#/containerDefinitions/0/image=app", 2, `"app" is not NAMESPACE:NAME[:tag|:name|:digest]`},
		{"../task.json#/a=apps:app", 2, "../task.json is not under the directory updated"},
		{"ecs/task.yaml#/a=apps:app", 2, "ecs/task.yaml is not a .json file; mark the values of YAML"},
		{"ecs/task.json#/containerDefinitions/1/image=apps:app", 1, "ecs/task.json: /containerDefinitions/1/image: the document has no value there to set for apps:app"},
		{"ecs/gone.json#/image=apps:app", 1, "ecs/gone.json: no such file to set the named values of"},
	} {
		code, _, errs := runCLI(t, "", "update", "--dir", dir, "--json", tt.arg, "--policy", "apps:app=ghcr.io/acme/app:1.5.0")
		if code != tt.code || !strings.Contains(errs, tt.errs) {
			t.Errorf("--json %s: exit %d, stderr %q; want %d and %q", tt.arg, code, errs, tt.code, tt.errs)
		}
	}
}
