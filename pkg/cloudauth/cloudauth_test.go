package cloudauth

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"toolkit.dev/image-toolkit/pkg/testing/testcloud"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// saToken stands for the projected ServiceAccount token a cloud's
// webhook mounts into the controller's pod: a JWT, which the token
// services here check the shape of, not the signature.
const saToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6aW1hZ2UtdG9vbGtpdC1zeXN0ZW06aW1hZ2UtcmVmbGVjdG9yLWNvbnRyb2xsZXIifQ.c2lnbmF0dXJl"

// controllerIdentity sets the environment each cloud's identity webhook
// (EKS IRSA, Azure Workload Identity) or platform (GKE's metadata server)
// gives the controller's pod, pointing at the stand-in.
func controllerIdentity(t *testing.T, cloud *testcloud.Cloud, provider string) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(saToken), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nothing of the machine running the test may be used.
	t.Setenv("HOME", dir)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("CLOUDSDK_CONFIG", dir)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	// AWS_CA_BUNDLE (set on some build machines) replaces the trusted
	// roots, so the stand-in's CA would not be trusted. Unset, as in a
	// pod; TestAWSCABundle sets it.
	t.Setenv("AWS_CA_BUNDLE", "")
	os.Unsetenv("AWS_CA_BUNDLE")
	switch provider {
	case AWS:
		t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/image-reflector")
		t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
		t.Setenv("AWS_REGION", "us-east-1")
	case GCP:
		t.Setenv("GCE_METADATA_HOST", cloud.MetadataHost)
	case Azure:
		t.Setenv("AZURE_CLIENT_ID", "0b5a0a9e-3c5b-4d1e-9d55-4c0c6f1e2a11")
		t.Setenv("AZURE_TENANT_ID", testcloud.Tenant)
		t.Setenv("AZURE_FEDERATED_TOKEN_FILE", tokenFile)
		t.Setenv("AZURE_AUTHORITY_HOST", "https://"+testcloud.EntraHost+"/")
	}
}

// TestRegistryProtocol is a protocol test: it proves that each provider's
// credentials are obtained from the controller's identity through the
// token services' documented exchanges (STS AssumeRoleWithWebIdentity then
// ECR GetAuthorizationToken; the GCE metadata server's token; Entra's
// client credentials grant with the federated token then ACR's
// /oauth2/exchange), all served on loopback by pkg/testing/testcloud under the
// clouds' real host names, that a real registry (pkg/testing/testregistry, basic
// authentication with exactly the issued credential) lists tags with
// them, and that a second request is served from the cache with no
// exchange. It does not prove that a cloud accepts our requests.
func TestRegistryProtocol(t *testing.T) {
	cloud := testcloud.New(t)
	cloud.Install(t)
	tests := []struct {
		provider, repo string
		user, password string
		exchanges      []string // endpoints called once each
	}{
		{AWS, testcloud.ECRRegistry + "/podinfo", "AWS", testcloud.ECRPassword(1),
			[]string{testcloud.CallSTS, testcloud.CallECR}},
		{AWS, testcloud.ECRPublic + "/toolkit/podinfo", "AWS", testcloud.ECRPublicPassword(1),
			[]string{testcloud.CallSTS, testcloud.CallECRPublic}},
		{GCP, testcloud.GARRegistry + "/toolkit-project/images/podinfo", "oauth2accesstoken", testcloud.GCPToken(1),
			[]string{testcloud.CallMetadata}},
		{Azure, testcloud.ACRRegistry + "/podinfo", testcloud.ACRUser, cloud.ACRRefreshToken(1),
			[]string{testcloud.CallEntra, testcloud.CallACRExchange}},
	}
	for _, tt := range tests {
		t.Run(tt.provider+"/"+strings.Split(tt.repo, "/")[0], func(t *testing.T) {
			controllerIdentity(t, cloud, tt.provider)
			reg := testregistry.New(t, testregistry.Options{Username: tt.user, Password: tt.password})
			path := tt.repo[strings.Index(tt.repo, "/")+1:]
			reg.Push(t, path, "6.5.0")
			cloud.Registry = reg.Host
			before := map[string]int{}
			for _, e := range tt.exchanges {
				before[e] = cloud.Calls(e)
			}
			m := NewMetrics("test")
			is, err := New(Options{}, m)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				creds, err := is.Registry(context.Background(), RegistryRequest{Provider: tt.provider, Repository: tt.repo})
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				if creds.Secret != tt.password {
					t.Fatalf("request %d: secret %q, want %q", i+1, creds.Secret, tt.password)
				}
				repo, err := name.NewRepository(tt.repo)
				if err != nil {
					t.Fatal(err)
				}
				tags, err := remote.List(repo, remote.WithAuth(creds), remote.WithContext(context.Background()),
					remote.WithTransport(http.DefaultTransport))
				if err != nil || len(tags) != 1 || tags[0] != "6.5.0" {
					t.Fatalf("request %d: listing tags with the credentials: %v %v", i+1, tags, err)
				}
			}
			for _, e := range tt.exchanges {
				if got := cloud.Calls(e) - before[e]; got != 1 {
					t.Errorf("%s called %d times for two requests, want 1 (the second from the cache)", e, got)
				}
			}
			// Controller-level identity: one access token, one registry
			// credential (GCP's registry credential is its access token).
			want := 1.0
			if got := testutil.ToFloat64(m.Tokens.WithLabelValues(tt.provider, "access_token", "issued")); got != want {
				t.Errorf("access tokens issued: %v, want %v", got, want)
			}
			if got := testutil.ToFloat64(m.Tokens.WithLabelValues(tt.provider, "registry", "issued")); got != want {
				t.Errorf("registry credentials issued: %v, want %v", got, want)
			}
		})
	}
}

// TestRegistryRefused proves that a token service's refusal is an error
// naming it, counted as a failure and not cached: the next request asks
// again.
func TestRegistryRefused(t *testing.T) {
	cloud := testcloud.New(t)
	cloud.Install(t)
	controllerIdentity(t, cloud, AWS)
	m := NewMetrics("test")
	is, err := New(Options{}, m)
	if err != nil {
		t.Fatal(err)
	}
	cloud.Fail(testcloud.CallECR)
	req := RegistryRequest{Provider: AWS, Repository: testcloud.ECRRegistry + "/podinfo"}
	if _, err := is.Registry(context.Background(), req); err == nil || !strings.Contains(err.Error(), "AccessDeniedException") {
		t.Fatalf("refused: %v", err)
	}
	if got := testutil.ToFloat64(m.Tokens.WithLabelValues(AWS, "registry", "failed")); got != 1 {
		t.Errorf("failures counted: %v, want 1", got)
	}
	if _, err := is.Registry(context.Background(), req); err != nil {
		t.Fatalf("after the refusal: %v", err)
	}
	if n := cloud.Calls(testcloud.CallECR); n != 2 {
		t.Errorf("ECR called %d times, want 2", n)
	}
}

// TestCheckRegistry proves a provider is refused for a registry it does
// not serve, before any network call, with what it serves in the message.
func TestCheckRegistry(t *testing.T) {
	tests := []struct {
		provider, repo string
		ok             bool
	}{
		{AWS, "123456789012.dkr.ecr.eu-west-1.amazonaws.com/app", true},
		{AWS, "123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com/app", true},
		{AWS, "public.ecr.aws/org/app", true},
		{AWS, "ghcr.io/org/app", false},
		{AWS, "123456789012.dkr.ecr.eu-west-1.amazonaws.com.evil.example/app", false},
		{GCP, "europe-docker.pkg.dev/project/repo/app", true},
		{GCP, "gcr.io/project/app", true},
		{GCP, "eu.gcr.io/project/app", true},
		{GCP, "docker.io/library/nginx", false},
		{Azure, "toolkit.azurecr.io/app", true},
		{Azure, "toolkit.azurecr.cn/app", true},
		{Azure, "quay.io/org/app", false},
		{"oracle", "toolkit.azurecr.io/app", false},
	}
	for _, tt := range tests {
		err := CheckRegistry(tt.provider, tt.repo)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrProviderMismatch)) {
			t.Errorf("%s %s: %v", tt.provider, tt.repo, err)
		}
	}
	err := CheckRegistry(AWS, "ghcr.io/org/app")
	if want := "provider aws does not serve registry ghcr.io; it serves ECR"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("message %q lacks %q", err, want)
	}
}

// TestServiceAccountNeedsFlag proves that naming a ServiceAccount without
// object-level workload identity is refused before any exchange.
func TestServiceAccountNeedsFlag(t *testing.T) {
	is, err := New(Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = is.Registry(context.Background(), RegistryRequest{Provider: AWS, Repository: testcloud.ECRRegistry + "/app",
		Namespace: "apps", ServiceAccountName: "puller"})
	if !errors.Is(err, ErrWorkloadIdentityDisabled) {
		t.Fatalf("got %v", err)
	}
}
