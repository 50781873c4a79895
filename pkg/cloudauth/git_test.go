package cloudauth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/git/gitsecret"
	"toolkit.dev/image-toolkit/pkg/testing/testcloud"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
)

// TestGitHubAppProtocol is a protocol test of provider github through
// pkg/git's one credentials layer: the App's Secret (Flux's keys) makes a
// JWT that GitHub's installation-token endpoint, as its REST API documents
// it (served by pkg/testing/testcloud on loopback as api.github.com or a GitHub
// Enterprise /api/v3/ base URL), verifies (RS256 with the App's key, iss
// the App ID, iat and exp within GitHub's bounds) and answers with an
// installation token; a real git server (pkg/testing/testgit over HTTPS) then
// lists refs with user x-access-token and exactly that token as the
// password. Two listings after reading the Auth make one exchange (the
// token is cached); a key GitHub does not know is ErrAuthentication, a
// Secret missing keys ErrInvalidCredentials, before any call.
func TestGitHubAppProtocol(t *testing.T) {
	cloud := testcloud.New(t)
	cloud.Install(t)
	otherKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	otherPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(otherKey)})
	appID := []byte(strconv.FormatInt(cloud.GitHubAppID, 10))

	tests := []struct {
		name     string
		secret   map[string][]byte
		wantErr  error
		lookups  int // installation lookups by owner
		exchange int // token exchanges for the read and two listings
	}{
		{name: "installation ID", secret: map[string][]byte{"githubAppID": appID, "githubAppInstallationID": []byte("1001"),
			"githubAppPrivateKey": cloud.GitHubKeyPEM}, exchange: 1},
		{name: "installation owner", secret: map[string][]byte{"githubAppID": appID, "githubAppInstallationOwner": []byte("toolkit-org"),
			"githubAppPrivateKey": cloud.GitHubKeyPEM}, lookups: 1, exchange: 1},
		{name: "GitHub Enterprise base URL", secret: map[string][]byte{"githubAppID": appID, "githubAppInstallationID": []byte("1001"),
			"githubAppPrivateKey": cloud.GitHubKeyPEM, "githubAppBaseURL": []byte(cloud.URL() + "/api/v3")}, exchange: 1},
		{name: "unknown key", secret: map[string][]byte{"githubAppID": appID, "githubAppInstallationID": []byte("1001"),
			"githubAppPrivateKey": otherPEM}, wantErr: git.ErrAuthentication},
		{name: "no installation", secret: map[string][]byte{"githubAppID": appID, "githubAppPrivateKey": cloud.GitHubKeyPEM},
			wantErr: git.ErrInvalidCredentials},
		{name: "malformed key", secret: map[string][]byte{"githubAppID": appID, "githubAppInstallationID": []byte("1001"),
			"githubAppPrivateKey": []byte("not a key")}, wantErr: git.ErrInvalidCredentials},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			m := NewMetrics("test")
			is, err := New(Options{}, m)
			if err != nil {
				t.Fatal(err)
			}
			RegisterGitProviders(is)
			t.Cleanup(func() { git.RegisterProvider(GitHub, nil); git.RegisterProvider(Azure, nil) })

			n := cloud.Calls(testcloud.CallGitHubToken) + 1
			srv := testgit.New(t, testgit.Options{TLS: true, Username: "x-access-token", Password: testcloud.GitHubToken(n)})
			srv.CreateRepo(t, "fleet", map[string]string{"app.yaml": "image: podinfo:6.5.0\n"})
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "github-app", Namespace: "apps"}, Data: map[string][]byte{
				// One bundle for a private GitHub: its git and API servers'
				// CAs (here two stand-ins).
				"ca.crt": append(append([]byte{}, srv.CAPEM...), cloud.CAPEM...)}}
			for k, v := range tt.secret {
				secret.Data[k] = v
			}
			reader := fake.NewClientBuilder().WithObjects(secret).Build()
			lookups, exchanges := cloud.Calls(testcloud.CallGitHubLookup), cloud.Calls(testcloud.CallGitHubToken)

			url := srv.RepoURL("fleet")
			auth, _, err := gitsecret.Read(ctx, reader, "apps", git.Remote{URL: url, SecretName: "github-app", Provider: GitHub})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				if tt.wantErr == git.ErrInvalidCredentials && cloud.Calls(testcloud.CallGitHubToken) != exchanges {
					t.Error("an invalid Secret reached GitHub")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if auth.Password != "" {
				t.Error("the Auth read holds a token; it must be asked for at each operation")
			}
			for i := range 2 {
				refs, err := git.ListRefs(ctx, url, auth, "refs/heads/")
				if err != nil || refs["refs/heads/main"] == "" {
					t.Fatalf("listing %d: %v %v", i+1, refs, err)
				}
			}
			if got := cloud.Calls(testcloud.CallGitHubToken) - exchanges; got != tt.exchange {
				t.Errorf("%d token exchanges, want %d", got, tt.exchange)
			}
			if got := cloud.Calls(testcloud.CallGitHubLookup) - lookups; got != tt.lookups {
				t.Errorf("%d installation lookups, want %d", got, tt.lookups)
			}
			if got := testutil.ToFloat64(m.Tokens.WithLabelValues(GitHub, "git", "issued")); got != float64(tt.exchange) {
				t.Errorf("metric: %v tokens issued", got)
			}
		})
	}
}
