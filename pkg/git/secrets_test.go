package git

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/tests/testkit/testenv"
)

// ReadAuth reads both Secrets from the API server and gives the verdict of
// AuthFromSecrets; a missing Secret is ErrSecretNotFound and named.
func TestReadAuth(t *testing.T) {
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
	a, values, err := ReadAuth(ctx, env.Client, ns, url, "basic", "proxy")
	if err != nil || a.Username != "bot" || a.ProxyURL != "http://proxy:3128" || !slices.Contains(values, "s3cret-pw") {
		t.Fatalf("ReadAuth = %+v, %v, %v", a, values, err)
	}
	if _, _, err := ReadAuth(ctx, env.Client, ns, url, "half", ""); !errors.Is(err, ErrInvalidCredentials) {
		t.Errorf("a password without username: %v", err)
	}
	_, _, err = ReadAuth(ctx, env.Client, ns, url, "basic", "late")
	if !errors.Is(err, ErrSecretNotFound) || !strings.Contains(err.Error(), "Secret "+ns+"/late (the proxySecretRef) not found") {
		t.Errorf("a missing proxy Secret: %v", err)
	}
	if a, _, err := ReadAuth(ctx, env.Client, ns, url, "", ""); err != nil || a == nil {
		t.Errorf("no Secrets: %+v, %v", a, err)
	}
}
