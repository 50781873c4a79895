package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// One Secret, one verdict: the same credentials and proxy Secrets, given to
// an ImageUpdateAutomation and to an UpdateJob, are refused by both
// (automation Stalled InvalidSecret, job Failed InvalidSpec without an
// attempt) or accepted by both (the job then fails to reach 127.0.0.1:1, a
// git operation failure). Among the cases are those on which the two
// controllers once disagreed.
func TestSecretVerdictsAgree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cluster, bin := localenv.StartTest(t)
	for _, name := range []string{"image-automation-controller", "update-job-controller"} {
		p, err := cluster.StartController(ctx, bin, name)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Stop(20 * time.Second) }()
	}

	key, pub := testgit.SSHKeygen(t, "")
	encrypted, _ := testgit.SSHKeygen(t, "pw")
	known := "[127.0.0.1]:1 " + pub + "\n"
	ssh := map[string]string{"identity": string(key), "known_hosts": known}
	tests := []struct {
		name, url    string
		creds, proxy map[string]string
		valid        bool
	}{
		{"https basic", "https://127.0.0.1:1/fleet.git", map[string]string{"username": "bot", "password": "pw"}, nil, true},
		{"https password without username", "https://127.0.0.1:1/fleet.git", map[string]string{"password": "pw"}, nil, false},
		{"https username alone (a token as user name, as Flux takes it)", "https://127.0.0.1:1/fleet.git", map[string]string{"username": "tok"}, nil, true},
		{"https bearer and username", "https://127.0.0.1:1/fleet.git", map[string]string{"bearerToken": "t", "username": "bot", "password": "pw"}, nil, false},
		{"http bearer", "http://127.0.0.1:1/fleet.git", map[string]string{"bearerToken": "t"}, nil, false},
		{"https bad ca.crt", "https://127.0.0.1:1/fleet.git", map[string]string{"ca.crt": "not pem"}, nil, false},
		{"https socks5 proxy", "https://127.0.0.1:1/fleet.git", nil, map[string]string{"address": "socks5://127.0.0.1:2"}, true},
		{"https ftp proxy", "https://127.0.0.1:1/fleet.git", nil, map[string]string{"address": "ftp://127.0.0.1:2"}, false},
		{"proxy without address", "https://127.0.0.1:1/fleet.git", nil, map[string]string{"username": "u"}, false},
		{"ssh", "ssh://git@127.0.0.1:1/fleet.git", ssh, nil, true},
		{"ssh through an http proxy", "ssh://git@127.0.0.1:1/fleet.git", ssh, map[string]string{"address": "http://127.0.0.1:2"}, true},
		{"ssh without known_hosts", "ssh://git@127.0.0.1:1/fleet.git", map[string]string{"identity": string(key)}, nil, false},
		{"ssh known_hosts only whitespace", "ssh://git@127.0.0.1:1/fleet.git", map[string]string{"identity": string(key), "known_hosts": " \n"}, nil, false},
		{"ssh encrypted without password", "ssh://git@127.0.0.1:1/fleet.git", map[string]string{"identity": string(encrypted), "known_hosts": known}, nil, false},
	}
	ns := "default"
	var docs []string
	add := func(obj map[string]any) {
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	for i, tt := range tests {
		name := fmt.Sprintf("verdict-%d", i)
		repo := map[string]any{"url": tt.url, "timeout": "5s"}
		if tt.creds != nil {
			add(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": name + "-creds", "namespace": ns}, "stringData": tt.creds})
			repo["secretRef"] = map[string]any{"name": name + "-creds"}
		}
		if tt.proxy != nil {
			add(map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": name + "-proxy", "namespace": ns}, "stringData": tt.proxy})
			repo["proxySecretRef"] = map[string]any{"name": name + "-proxy"}
		}
		commit := map[string]any{"author": map[string]any{"name": "bot", "email": "bot@example.com"}}
		add(map[string]any{"apiVersion": "image.toolkit.dev/v1beta1", "kind": "ImageUpdateAutomation",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{"interval": "5m", "git": map[string]any{"repository": repo,
				"checkout": map[string]any{"ref": map[string]any{"branch": "main"}}, "commit": commit, "push": map[string]any{"branch": "main"}},
				"update": map[string]any{"path": "./", "strategy": "Setters"}}})
		add(map[string]any{"apiVersion": "update.toolkit.dev/v1beta1", "kind": "UpdateJob",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{"repository": repo, "checkout": map[string]any{"ref": map[string]any{"branch": "main"}},
				"update": map[string]any{"path": "./", "setters": []any{map[string]any{"policy": "default:app", "name": "example.com/app", "tag": "1.0.0"}}},
				"commit": commit, "backoffLimit": 0}})
	}
	apply := cluster.KubectlCmd(ctx, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(strings.Join(docs, "---\n"))
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}

	for i, tt := range tests {
		name := fmt.Sprintf("verdict-%d", i)
		t.Run(tt.name, func(t *testing.T) {
			a := &imagev1.ImageUpdateAutomation{}
			var ready *metav1.Condition
			testenv.Eventually(t, 60*time.Second, func() (bool, error) {
				if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, a); err != nil {
					return false, err
				}
				ready = conditions.Get(a, conditions.ReadyCondition)
				return ready != nil && ready.Status == metav1.ConditionFalse, nil
			})
			automationRefused := conditions.IsTrue(a, conditions.StalledCondition) && ready.Reason == imagev1.InvalidSecretReason

			j := &updatev1.UpdateJob{}
			testenv.Eventually(t, 60*time.Second, func() (bool, error) {
				err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, j)
				return err == nil && j.Status.Phase == updatev1.UpdateJobFailed, err
			})
			jr := conditions.Get(j, conditions.ReadyCondition)
			jobRefused := jr != nil && jr.Reason == conditions.InvalidSpecReason

			if automationRefused != !tt.valid || jobRefused != !tt.valid {
				t.Errorf("valid=%v: automation refused=%v (%s: %s); job refused=%v (%+v)",
					tt.valid, automationRefused, ready.Reason, ready.Message, jobRefused, jr)
			}
			// An accepted Secret fails the job only at the server (the
			// automation waits for its ImagePolicies first).
			if tt.valid && (conditions.IsTrue(a, conditions.StalledCondition) || jr == nil || jr.Reason != conditions.GitOperationFailedReason) {
				t.Errorf("an accepted Secret: automation %s (%s), job %+v", ready.Reason, ready.Message, jr)
			}
		})
	}
}
