package mirror

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/git/gitsecret"
	"toolkit.dev/image-toolkit/pkg/testing/testcloud"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// azureWorkloadIdentity gives the process what Azure Workload Identity's
// webhook gives the controller's pod (a projected ServiceAccount token and
// the AZURE_* variables), pointing at the stand-in, and nothing of the
// machine running the test.
func azureWorkloadIdentity(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	// The projected token's shape; the stand-in checks no signature.
	if err := os.WriteFile(token, []byte("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6aW1hZ2UtdG9vbGtpdC1zeXN0ZW06dXBkYXRlLWpvYi1jb250cm9sbGVyIn0.c2ln"), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"HOME": dir, "AZURE_CLIENT_ID": "0b5a0a9e-3c5b-4d1e-9d55-4c0c6f1e2a11", "AZURE_TENANT_ID": testcloud.Tenant,
		"AZURE_FEDERATED_TOKEN_FILE": token, "AZURE_AUTHORITY_HOST": "https://" + testcloud.EntraHost + "/",
	} {
		t.Setenv(k, v)
	}
}

// azureDevOps starts the pieces of an Azure DevOps protocol test: the
// Entra stand-in issuing tokens of the given lifetime, a git server over
// HTTPS that takes exactly the unexpired tokens Entra issued for Azure
// DevOps's scope as bearer tokens (as Azure DevOps takes them), the
// controller's issuer registered for provider azure, and the Auth a
// controller reads for the repository.
func azureDevOps(t *testing.T, lifetime time.Duration) (*testcloud.Cloud, *testgit.Server, *git.Auth) {
	cloud := testcloud.New(t)
	cloud.TokenLifetime = lifetime
	cloud.Install(t)
	azureWorkloadIdentity(t)
	is, err := cloudauth.New(cloudauth.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cloudauth.RegisterGitProviders(is)
	t.Cleanup(func() { git.RegisterProvider(cloudauth.GitHub, nil); git.RegisterProvider(cloudauth.Azure, nil) })

	srv := testgit.New(t, testgit.Options{TLS: true, Authorize: cloud.AzureDevOpsAuthorized})
	srv.CreateRepo(t, "fleet", map[string]string{"apps/app.yaml": "image: a:1\n"})
	// No credentials in the Secret: only the server's CA, which a real
	// dev.azure.com does not need.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ado-ca", Namespace: "apps"},
		Data: map[string][]byte{"ca.crt": srv.CAPEM}}
	reader := fake.NewClientBuilder().WithObjects(secret).Build()
	auth, _, err := gitsecret.Read(context.Background(), reader, "apps",
		git.Remote{URL: srv.RepoURL("fleet"), SecretName: "ado-ca", Provider: cloudauth.Azure})
	if err != nil {
		t.Fatal(err)
	}
	if auth.BearerToken != "" {
		t.Fatal("the Auth read holds a token; it must be asked for at each operation")
	}
	return cloud, srv, auth
}

// waitExpired waits until a token the stand-in issued has expired there:
// what follows must work with a token issued after it.
func waitExpired(t *testing.T, cloud *testcloud.Cloud, token string) {
	t.Helper()
	exp := cloud.ExpiresAt(token)
	if exp.IsZero() {
		t.Fatalf("token %s was not issued", token)
	}
	time.Sleep(time.Until(exp) + 100*time.Millisecond)
	if _, ok := cloud.Honoured(token); ok {
		t.Fatal("the token has not expired")
	}
}

// TestAzureDevOpsProtocol is a protocol test of provider azure for git
// through pkg/git's one credentials layer: Entra ID's token endpoint
// (pkg/testcloud, as the Microsoft identity platform documents its client
// credentials grant with a federated assertion) issues a token for Azure
// DevOps's scope from the controller's workload identity, and a real git
// server (pkg/testgit over HTTPS) taking exactly that token as a bearer
// token, as Azure DevOps does, serves the automation's ref listing
// (pkg/git.ListRefs) and a job's libgit2 fetch and push. One token
// exchange serves the read of the Auth, two listings, the fetch and the
// push (the cache); a token Entra refused is ErrAuthentication. It proves
// the wiring, not that Azure DevOps accepts our identity.
func TestAzureDevOpsProtocol(t *testing.T) {
	ctx := context.Background()
	cloud, srv, auth := azureDevOps(t, time.Hour)
	url := srv.RepoURL("fleet")
	for i := range 2 {
		if refs, err := git.ListRefs(ctx, url, auth, "refs/heads/"); err != nil || refs["refs/heads/main"] == "" {
			t.Fatalf("listing %d: %v %v", i+1, refs, err)
		}
	}
	commit, err := roundTrip(t, url, auth)
	if err != nil {
		t.Fatalf("fetch and push: %v", err)
	}
	if got := remoteHead(t, srv); got != commit {
		t.Errorf("main is %s, pushed %s", got, commit)
	}
	if n := cloud.Calls(testcloud.CallEntra); n != 1 {
		t.Errorf("%d Entra token requests for the read, two listings, a fetch and a push; want 1 (cached)", n)
	}
	if s := cloud.Subjects(); len(s) != 1 || !strings.Contains(s[0], "client=0b5a0a9e-3c5b-4d1e-9d55-4c0c6f1e2a11") {
		t.Errorf("Entra issued tokens to %v, want the controller's client ID", s)
	}
	// The server takes nothing else: no token, or one not from Entra.
	for _, a := range []*git.Auth{{CAPEM: srv.CAPEM}, {CAPEM: srv.CAPEM, BearerToken: "entra-access-token-999"}} {
		if _, err := git.ListRefs(ctx, url, a, "refs/heads/"); err == nil {
			t.Errorf("the server took bearer token %q", a.BearerToken)
		}
	}
}

// TestAzureDevOpsRefused proves that Entra refusing the identity (no
// federated credential for it) is ErrAuthentication when the Auth is
// read, not a transient failure, and is not cached: the next read asks
// again and works.
func TestAzureDevOpsRefused(t *testing.T) {
	cloud := testcloud.New(t)
	cloud.Install(t)
	azureWorkloadIdentity(t)
	is, err := cloudauth.New(cloudauth.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cloudauth.RegisterGitProviders(is)
	t.Cleanup(func() { git.RegisterProvider(cloudauth.GitHub, nil); git.RegisterProvider(cloudauth.Azure, nil) })
	reader := fake.NewClientBuilder().Build()
	remote := git.Remote{URL: "https://dev.azure.com/toolkit/fleet/_git/fleet", Provider: cloudauth.Azure}
	cloud.Fail(testcloud.CallEntra)
	_, _, err = gitsecret.Read(context.Background(), reader, "apps", remote)
	if !errors.Is(err, git.ErrAuthentication) || !strings.Contains(err.Error(), "AADSTS70021") {
		t.Fatalf("refused: %v, want ErrAuthentication with Entra's reason", err)
	}
	if _, _, err := gitsecret.Read(context.Background(), reader, "apps", remote); err != nil {
		t.Fatalf("after the refusal: %v", err)
	}
	if n := cloud.Calls(testcloud.CallEntra); n != 2 {
		t.Errorf("%d Entra token requests, want 2 (a refusal is not cached)", n)
	}
}

// TestTokenRefreshedDuringJob is a protocol test of tokens expiring while
// they are used: Entra (pkg/testcloud) issues tokens living a few seconds
// and the git server takes only unexpired ones. A job whose first token
// expires between its fetch and its push, and an automation listing refs
// again after expiry, each get a new token from the cache (the cache keeps
// a token for 80% of its lifetime) and succeed; the expired token is then
// refused by the server, so the success is the new token's. Nothing here
// measures speed: the waits are for the stand-in's expiry times.
func TestTokenRefreshedDuringJob(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, cloud *testcloud.Cloud, srv *testgit.Server, auth *git.Auth)
	}{
		{"job: fetch, token expires, push", func(t *testing.T, ctx context.Context, cloud *testcloud.Cloud, srv *testgit.Server, auth *git.Auth) {
			cache, err := NewCache(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			m, release, err := cache.Open(srv.RepoURL("fleet"))
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			if err := m.Fetch(ctx, auth); err != nil {
				t.Fatalf("fetch: %v", err)
			}
			head, _, err := m.Resolve(writeback.Ref{Branch: "main"})
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "work")
			if err := m.Checkout(head, dir); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "apps/app.yaml"), []byte("image: a:2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			commit, err := m.Commit(head, dir, []string{"apps/app.yaml"}, info("Update images"))
			if err != nil {
				t.Fatal(err)
			}
			// A long job: the token of the fetch is gone by the push.
			waitExpired(t, cloud, testcloud.EntraToken(1))
			if err := m.Push(ctx, auth, commit, []writeback.RefUpdate{{Dst: "refs/heads/main"}}); err != nil {
				t.Fatalf("push after the token expired: %v", err)
			}
			if got := remoteHead(t, srv); got != commit.String() {
				t.Errorf("main is %s, pushed %s", got, commit)
			}
		}},
		{"automation: listing refs after expiry", func(t *testing.T, ctx context.Context, cloud *testcloud.Cloud, srv *testgit.Server, auth *git.Auth) {
			url := srv.RepoURL("fleet")
			if _, err := git.ListRefs(ctx, url, auth, "refs/heads/"); err != nil {
				t.Fatalf("first listing: %v", err)
			}
			waitExpired(t, cloud, testcloud.EntraToken(1))
			if refs, err := git.ListRefs(ctx, url, auth, "refs/heads/"); err != nil || refs["refs/heads/main"] == "" {
				t.Fatalf("listing after the token expired: %v %v", refs, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			// Five seconds: the cache keeps the first token for 3-4 s
			// (80%, whole seconds), long enough for the read and the first
			// operation on a busy machine to share it.
			cloud, srv, auth := azureDevOps(t, 5*time.Second)
			tt.run(t, ctx, cloud, srv, auth)
			if n := cloud.Calls(testcloud.CallEntra); n < 2 {
				t.Errorf("%d Entra token requests, want a new token after the first expired", n)
			}
			// The expired token is refused: the operation after expiry
			// succeeded with a new one.
			stale := &git.Auth{CAPEM: srv.CAPEM, BearerToken: testcloud.EntraToken(1)}
			if _, err := git.ListRefs(ctx, srv.RepoURL("fleet"), stale, "refs/heads/"); err == nil {
				t.Error("the server took the expired token")
			}
		})
	}
}

// remoteHead is the commit of main on the server.
func remoteHead(t *testing.T, srv *testgit.Server) string {
	t.Helper()
	out := testgit.Git(t, srv.Root, "--git-dir", filepath.Join(srv.Root, "fleet.git"), "rev-parse", "refs/heads/main")
	return strings.TrimSpace(out)
}
