package gitsecret

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// Read reads both Secrets from the API server and gives the verdict of
// git.AuthFromSecrets; a missing Secret is ErrNotFound and named.
func TestReadReadsBothSecrets(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	ns := env.Namespace(t)
	for name, data := range map[string]map[string][]byte{
		"basic": {"username": []byte("bot"), "password": []byte("s3cret-pw")},
		"half":  {"password": []byte("s3cret-pw")},
		"proxy": {"address": []byte("http://proxy:3128")},
	} {
		if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	url := "https://git.example.com/fleet.git"
	a, values, err := Read(ctx, env.Client, ns, git.Remote{URL: url, SecretName: "basic", ProxySecretName: "proxy"})
	if err != nil || a.Username != "bot" || a.ProxyURL != "http://proxy:3128" || !slices.Contains(values, "s3cret-pw") {
		t.Fatalf("Read = %+v, %v, %v", a, values, err)
	}
	if _, _, err := Read(ctx, env.Client, ns, git.Remote{URL: url, SecretName: "half", ProxySecretName: ""}); !errors.Is(err, git.ErrInvalidCredentials) {
		t.Errorf("a password without username: %v", err)
	}
	_, _, err = Read(ctx, env.Client, ns, git.Remote{URL: url, SecretName: "basic", ProxySecretName: "late"})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "Secret "+ns+"/late (the proxySecretRef) not found") {
		t.Errorf("a missing proxy Secret: %v", err)
	}
	if a, _, err := Read(ctx, env.Client, ns, git.Remote{URL: url, SecretName: "", ProxySecretName: ""}); err != nil || a == nil {
		t.Errorf("no Secrets: %+v, %v", a, err)
	}
}

func argoSecret(name, typ, url string, data map[string]string) corev1.Secret {
	s := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "argocd",
		Labels: map[string]string{git.ArgoCDSecretTypeLabel: typ}}, Data: map[string][]byte{"url": []byte(url)}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// The Secret picked for a URL is the one Argo CD uses: the repository
// Secret of the URL (compared as Argo CD compares them) when it holds
// credentials, else the repo-creds Secret of the longest URL prefix.
func TestFindArgoCDPicksWhatArgoCDUses(t *testing.T) {
	creds := map[string]string{"username": "bot", "password": "p"}
	secrets := []corev1.Secret{
		argoSecret("org", git.ArgoCDRepoCreds, "https://git.example.com/org", creds),
		argoSecret("org-team", git.ArgoCDRepoCreds, "https://git.example.com/org/team", creds),
		argoSecret("apps", git.ArgoCDRepository, "https://git.example.com/org/team/apps.git", creds),
		argoSecret("bare", git.ArgoCDRepository, "https://git.example.com/org/team/bare", nil),
		argoSecret("other-label", "cluster", "https://git.example.com/org/team/x", creds),
	}
	for url, want := range map[string]string{
		"https://git.example.com/org/team/apps":       "apps",
		"https://GIT.example.com/org/team/apps.git/":  "apps",
		"https://git.example.com/org/team/bare.git":   "org-team", // a repository Secret without credentials
		"https://git.example.com/org/team/x":          "org-team",
		"https://git.example.com/org/shop.git":        "org",
		"https://git.example.com/elsewhere/shop.git":  "",
		"ssh://git@git.example.com/org/team/apps.git": "",
	} {
		got := ""
		if s := FindArgoCD(secrets, url); s != nil {
			got = s.Name
		}
		if got != want {
			t.Errorf("%s: Secret %q, want %q", url, got, want)
		}
	}
}
