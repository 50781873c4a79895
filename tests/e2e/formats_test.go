package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/tests/internal/chain"
)

// Files that are not Kubernetes YAML through the three controllers: a new
// tag becomes one commit that changes the manifest, a Dockerfile's FROM
// (by its marker) and an ECS task definition's image (JSON, named by the
// automation's update.files), with the change of each in the message.
func TestChainDockerfileAndTaskDefinition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, root := startChain(ctx, t, []string{"6.3.0", "6.4.0"}, chain.Options{})
	host := env.RegistryHost + "/" + chain.Image
	dockerfile := fmt.Sprintf("FROM golang:1.26 AS build\nRUN go build -o /app .\n\n# {\"$imagepolicy\": \"default:podinfo\"}\nFROM %s:6.3.0\nCOPY --from=build /app /app\n", host)
	task := fmt.Sprintf("{\n  \"family\": \"podinfo\",\n  \"containerDefinitions\": [\n    {\"name\": \"podinfo\", \"image\": \"%s:6.3.0\", \"essential\": true}\n  ]\n}\n", host)
	if _, err := env.Commit(map[string]string{"clusters/prod/Dockerfile": dockerfile, "clusters/prod/ecs/task.json": task}, "Add the Dockerfile and the task definition"); err != nil {
		t.Fatal(err)
	}
	samples, err := env.Samples(root)
	if err != nil {
		t.Fatal(err)
	}
	const strategy = "    strategy: Setters\n"
	if strings.Count(samples, strategy) != 1 {
		t.Fatalf("the sample automation's strategy line is not there once:\n%s", samples)
	}
	samples = strings.Replace(samples, strategy, strategy+"    files:\n    - path: ecs/task.json\n      pointer: /containerDefinitions/0/image\n      policy: default:podinfo\n", 1)
	start := env.Head("main")
	if err := env.Apply(ctx, samples); err != nil {
		t.Fatal(err)
	}
	commit := waitHead(t, env, "main", start)
	files := must(env.FleetGit("show", "--name-only", "--format=", commit))
	if files != "clusters/prod/Dockerfile\nclusters/prod/ecs/task.json\nclusters/prod/podinfo.yaml\n" {
		t.Errorf("commit %s changed:\n%s", commit, files)
	}
	diff := must(env.FleetGit("show", "--format=", commit))
	for _, want := range []string{
		"+FROM " + host + ":6.4.0\n",
		`+    {"name": "podinfo", "image": "` + host + `:6.4.0", "essential": true}` + "\n",
		"+        image: " + host + ":6.4.0 # {\"$imagepolicy\": \"default:podinfo\"}\n",
	} {
		if !strings.Contains(diff, want) {
			t.Errorf("the commit lacks %q:\n%s", want, diff)
		}
	}
	if n := strings.Count(diff, "\n+") - strings.Count(diff, "\n+++"); n != 3 {
		t.Errorf("%d lines added, want the 3 values:\n%s", n, diff)
	}
	msg := must(env.FleetGit("log", "-1", "--format=%B", commit))
	if strings.Count(msg, host+":6.3.0 -> "+host+":6.4.0") != 3 {
		t.Errorf("message:\n%s", msg)
	}
}
