// Package cloudauth issues short-lived credentials from cloud identities:
// registry credentials for ECR (and ECR Public), Artifact Registry and GCR,
// and ACR, and git credentials as a GitHub App installation or an Azure
// DevOps workload identity. The identity is the controller's (IRSA or EKS
// Pod Identity, GKE Workload Identity or the metadata server, Azure
// Workload Identity or a managed identity), or with object-level workload
// identity an object's ServiceAccount, whose Kubernetes token (TokenRequest)
// is exchanged for the cloud's.
//
// The token exchanges are Flux's, github.com/fluxcd/pkg/auth (pinned at
// v0.56.0: later versions need Go 1.27), so that a cluster set up for
// Flux's controllers works for ours with the same annotations and IAM
// bindings. This package adds what is ours: the checks that give a
// Stalled reason (a provider that does not serve the registry, a
// ServiceAccount without the flag), one token cache per controller, and
// metrics of the tokens issued. It knows nothing of controllers.
package cloudauth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/fluxcd/pkg/auth"
	"github.com/fluxcd/pkg/auth/aws"
	"github.com/fluxcd/pkg/auth/azure"
	"github.com/fluxcd/pkg/auth/gcp"
	"github.com/fluxcd/pkg/auth/githubapp"
	"github.com/fluxcd/pkg/cache"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-github/v87/github"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/git"
)

// Provider names, as the API's provider fields take them.
const (
	AWS    = "aws"
	GCP    = "gcp"
	Azure  = "azure"
	GitHub = "github"
)

// ErrProviderMismatch: the provider does not serve the registry or
// repository named; no retry helps until the spec changes.
var ErrProviderMismatch = errors.New("the provider does not serve this registry")

// ErrWorkloadIdentityDisabled: an object names a ServiceAccount whose
// cloud identity to use, and the controller does not run with
// --object-level-workload-identity.
var ErrWorkloadIdentityDisabled = errors.New("object-level workload identity is not enabled on the controller (--object-level-workload-identity)")

// FlagObjectLevelWorkloadIdentity is the controllers' flag that lets
// objects use their ServiceAccount's cloud identity: Flux's feature gate
// ObjectLevelWorkloadIdentity.
const FlagObjectLevelWorkloadIdentity = "object-level-workload-identity"

// Options configure an Issuer.
type Options struct {
	// Client reads ServiceAccounts and creates their tokens
	// (serviceaccounts get, serviceaccounts/token create): with
	// ObjectLevelWorkloadIdentity, and for the controller's own token of
	// generic clusters. It should read past any cache, so that the
	// controller needs no watch on ServiceAccounts.
	Client client.Client
	// ObjectLevelWorkloadIdentity lets a request's ServiceAccountName
	// choose the identity.
	ObjectLevelWorkloadIdentity bool
	// CacheSize bounds the tokens kept (1,000 when 0); the least recently
	// used go first.
	CacheSize int
	// Timeout bounds each request for credentials, all exchanges
	// included, when the caller's context allows longer (30 s when 0).
	Timeout time.Duration
}

// Issuer issues credentials and caches them until 80% of their lifetime
// has passed (at most an hour), per identity (provider, ServiceAccount,
// role or App) and registry or repository.
type Issuer struct {
	opts    Options
	cache   *cache.TokenCache
	metrics *Metrics
}

// New returns an Issuer recording into m (nil: no metrics).
func New(o Options, m *Metrics) (*Issuer, error) {
	if o.CacheSize == 0 {
		o.CacheSize = 1000
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.ObjectLevelWorkloadIdentity && o.Client == nil {
		return nil, errors.New("object-level workload identity needs a Kubernetes client")
	}
	c, err := cache.NewTokenCache(o.CacheSize)
	if err != nil {
		return nil, err
	}
	if o.ObjectLevelWorkloadIdentity {
		// The library checks its own switch before each TokenRequest.
		auth.EnableObjectLevelWorkloadIdentity()
	}
	return &Issuer{opts: o, cache: c, metrics: m}, nil
}

// Metrics count the credentials issued and the failures to get them.
type Metrics struct {
	Tokens *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics named
// imagetoolkit_<subsystem>_cloud_tokens_total.
func NewMetrics(subsystem string) *Metrics {
	return &Metrics{Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "imagetoolkit", Subsystem: subsystem, Name: "cloud_tokens_total",
		Help: "Cloud credentials requested from a provider (cache misses) by provider (aws, gcp, azure, github), " +
			"kind (access_token: the cloud identity's, registry: a registry's, git: a repository's) and result (issued, failed).",
	}, []string{"provider", "kind", "result"})}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector { return []prometheus.Collector{m.Tokens} }

func (m *Metrics) record(provider, kind string, err error) {
	if m == nil {
		return
	}
	result := "issued"
	if err != nil {
		result = "failed"
	}
	m.Tokens.WithLabelValues(provider, kind, result).Inc()
}

// RegistryRequest asks for a registry's credentials.
type RegistryRequest struct {
	// Provider is aws, gcp or azure.
	Provider string
	// Repository is the image repository, e.g.
	// 123456789012.dkr.ecr.eu-west-1.amazonaws.com/app.
	Repository string
	// Namespace and ServiceAccountName name the ServiceAccount whose
	// identity to use; an empty name uses the controller's.
	Namespace, ServiceAccountName string
	// ProxyURL, when set, carries the token exchanges.
	ProxyURL *url.URL
}

// RegistryCredentials are a registry's credentials.
type RegistryCredentials struct {
	authn.Authenticator
	// Secret is the credential's secret value, for redacting messages.
	Secret    string
	ExpiresAt time.Time
}

// registryProviders are the library's, by name.
func registryProvider(name string) (auth.ArtifactRegistryCredentialsProvider, string) {
	switch name {
	case AWS:
		return aws.Provider{Implementation: awsSDK{}}, "ECR (<account>.dkr.ecr.<region>.amazonaws.com, also .com.cn and FIPS) and ECR Public (public.ecr.aws)"
	case GCP:
		return gcp.Provider{}, "Artifact Registry (<location>-docker.pkg.dev) and Container Registry (gcr.io, <region>.gcr.io)"
	case Azure:
		return azure.Provider{}, "ACR (<name>.azurecr.io, .azurecr.cn, .azurecr.us, .azurecr.de)"
	}
	return nil, ""
}

// CheckRegistry reports whether provider serves the repository's
// registry: ErrProviderMismatch (with what it serves) when not. It makes
// no network call.
func CheckRegistry(provider, repository string) error {
	p, serves := registryProvider(provider)
	if p == nil {
		return fmt.Errorf("%w: unknown provider %q (aws, gcp, azure)", ErrProviderMismatch, provider)
	}
	if _, err := p.ParseArtifactRepository(repository); err != nil {
		reg, _ := auth.GetRegistryFromArtifactRepository(repository)
		return fmt.Errorf("%w: provider %s does not serve registry %s; it serves %s", ErrProviderMismatch, provider, reg, serves)
	}
	return nil
}

// Registry returns credentials for a repository, from the cache or issued
// now. Errors are ErrProviderMismatch, ErrWorkloadIdentityDisabled, or the
// provider's (retry later).
func (is *Issuer) Registry(ctx context.Context, req RegistryRequest) (*RegistryCredentials, error) {
	if err := CheckRegistry(req.Provider, req.Repository); err != nil {
		return nil, err
	}
	if req.ServiceAccountName != "" && !is.opts.ObjectLevelWorkloadIdentity {
		return nil, fmt.Errorf("serviceAccountName %s: %w", req.ServiceAccountName, ErrWorkloadIdentityDisabled)
	}
	p, _ := registryProvider(req.Provider)
	ctx, cancel := context.WithTimeout(ctx, is.opts.Timeout)
	defer cancel()
	creds, err := auth.GetArtifactRegistryCredentials(ctx, counted{p, is.metrics}, req.Repository,
		is.options(req.Namespace, req.ServiceAccountName, req.ProxyURL)...)
	if err != nil {
		return nil, err
	}
	cfg, err := creds.Authorization()
	if err != nil {
		return nil, err
	}
	return &RegistryCredentials{Authenticator: creds.Authenticator, Secret: cfg.Password, ExpiresAt: creds.ExpiresAt}, nil
}

func (is *Issuer) options(namespace, serviceAccount string, proxy *url.URL) []auth.Option {
	opts := []auth.Option{auth.WithCache(*is.cache, cache.InvolvedObject{})}
	if serviceAccount != "" {
		opts = append(opts, auth.WithClient(is.opts.Client),
			auth.WithServiceAccountName(serviceAccount), auth.WithServiceAccountNamespace(namespace))
	}
	if proxy != nil {
		opts = append(opts, auth.WithProxyURL(*proxy))
	}
	return opts
}

// counted is a library provider whose exchanges are counted: the library
// calls them on cache misses only.
type counted struct {
	auth.ArtifactRegistryCredentialsProvider
	m *Metrics
}

func (c counted) NewControllerToken(ctx context.Context, opts ...auth.Option) (auth.Token, error) {
	t, err := c.ArtifactRegistryCredentialsProvider.NewControllerToken(ctx, opts...)
	c.m.record(c.GetName(), "access_token", err)
	return t, err
}

func (c counted) NewTokenForServiceAccount(ctx context.Context, oidcToken string, sa corev1.ServiceAccount, opts ...auth.Option) (auth.Token, error) {
	t, err := c.ArtifactRegistryCredentialsProvider.NewTokenForServiceAccount(ctx, oidcToken, sa, opts...)
	c.m.record(c.GetName(), "access_token", err)
	return t, err
}

func (c counted) NewArtifactRegistryCredentials(ctx context.Context, input string, token auth.Token, opts ...auth.Option) (*auth.ArtifactRegistryCredentials, error) {
	creds, err := c.ArtifactRegistryCredentialsProvider.NewArtifactRegistryCredentials(ctx, input, token, opts...)
	c.m.record(c.GetName(), "registry", err)
	return creds, err
}

// countedGit is counted for git credentials.
type countedGit struct {
	auth.GitCredentialsProvider
	m *Metrics
}

func (c countedGit) NewControllerToken(ctx context.Context, opts ...auth.Option) (auth.Token, error) {
	t, err := c.GitCredentialsProvider.NewControllerToken(ctx, opts...)
	c.m.record(c.GetName(), "access_token", err)
	return t, err
}

func (c countedGit) NewTokenForServiceAccount(ctx context.Context, oidcToken string, sa corev1.ServiceAccount, opts ...auth.Option) (auth.Token, error) {
	t, err := c.GitCredentialsProvider.NewTokenForServiceAccount(ctx, oidcToken, sa, opts...)
	c.m.record(c.GetName(), "access_token", err)
	return t, err
}

func (c countedGit) NewGitCredentials(ctx context.Context, input string, token auth.Token, opts ...auth.Option) (*auth.GitCredentials, error) {
	creds, err := c.GitCredentialsProvider.NewGitCredentials(ctx, input, token, opts...)
	c.m.record(c.GetName(), "git", err)
	return creds, err
}

// GitCredentials implements git.CredentialProvider: github (a GitHub App
// installation token, user x-access-token) and azure (an Azure DevOps
// token of the workload identity, sent as a bearer token).
func (is *Issuer) GitCredentials(ctx context.Context, req git.ProviderRequest) (git.ProviderCredentials, error) {
	ctx, cancel := context.WithTimeout(ctx, is.opts.Timeout)
	defer cancel()
	var proxy *url.URL
	if req.ProxyURL != "" {
		u, err := url.Parse(req.ProxyURL)
		if err != nil {
			return git.ProviderCredentials{}, fmt.Errorf("%w: the proxy URL does not parse", git.ErrInvalidCredentials)
		}
		proxy = u
	}
	switch req.Provider {
	case GitHub:
		return is.gitHubApp(ctx, req, proxy)
	case Azure:
		if req.ServiceAccountName != "" && !is.opts.ObjectLevelWorkloadIdentity {
			return git.ProviderCredentials{}, fmt.Errorf("%w: serviceAccountName %s: %w", git.ErrInvalidCredentials, req.ServiceAccountName, ErrWorkloadIdentityDisabled)
		}
		u, err := url.Parse(req.URL)
		if err != nil {
			return git.ProviderCredentials{}, fmt.Errorf("%w: the repository URL does not parse", git.ErrInvalidCredentials)
		}
		opts := append(is.options(req.Namespace, req.ServiceAccountName, proxy), auth.WithGitURL(*u))
		c, err := auth.GetGitCredentials(ctx, countedGit{azure.Provider{}, is.metrics}, opts...)
		if err != nil {
			// Entra answering (no federated credential, unknown client)
			// is a refusal of the identity, not an outage.
			var afe *azidentity.AuthenticationFailedError
			if errors.As(err, &afe) && afe.RawResponse != nil {
				return git.ProviderCredentials{}, fmt.Errorf("%w: Entra ID refused the identity: %w", git.ErrAuthentication, err)
			}
			return git.ProviderCredentials{}, err
		}
		return git.ProviderCredentials{BearerToken: c.BearerToken, Username: c.Username, Password: c.Password, ExpiresAt: c.ExpiresAt}, nil
	}
	return git.ProviderCredentials{}, fmt.Errorf("%w: provider %q issues no git credentials (github, azure)", git.ErrInvalidCredentials, req.Provider)
}

// appToken is an installation token, for the cache.
type appToken struct{ *githubapp.AppToken }

// gitHubApp returns an installation token of the App whose keys the
// Secret holds (Flux's: githubAppID, githubAppInstallationID or
// githubAppInstallationOwner, githubAppPrivateKey, optional
// githubAppBaseURL for GitHub Enterprise).
func (is *Issuer) gitHubApp(ctx context.Context, req git.ProviderRequest, proxy *url.URL) (git.ProviderCredentials, error) {
	if req.ServiceAccountName != "" {
		return git.ProviderCredentials{}, fmt.Errorf("%w: provider github authenticates as the App of the Secret, not a ServiceAccount: unset serviceAccountName", git.ErrInvalidCredentials)
	}
	if req.Secret == nil {
		return git.ProviderCredentials{}, fmt.Errorf("%w: provider github needs a secretRef with the App's %s, %s (or %s) and %s",
			git.ErrInvalidCredentials, githubapp.KeyAppID, githubapp.KeyAppInstallationID, githubapp.KeyAppInstallationOwner, githubapp.KeyAppPrivateKey)
	}
	opts := []githubapp.OptFunc{githubapp.WithAppData(req.Secret)}
	if proxy != nil {
		opts = append(opts, githubapp.WithProxyURL(proxy))
	}
	if len(req.CAPEM) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		pool.AppendCertsFromPEM(req.CAPEM)
		opts = append(opts, githubapp.WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	}
	client, err := githubapp.New(opts...)
	if err != nil {
		// Its messages name the missing or malformed key, never a value.
		return git.ProviderCredentials{}, fmt.Errorf("%w: GitHub App Secret: %w", git.ErrInvalidCredentials, err)
	}
	// Keyed by everything that makes the token, by hash: the key holds no
	// secret in the clear.
	h := sha256.New()
	for _, k := range []string{githubapp.KeyAppID, githubapp.KeyAppInstallationID, githubapp.KeyAppInstallationOwner,
		githubapp.KeyAppBaseURL, githubapp.KeyAppPrivateKey} {
		fmt.Fprintf(h, "%s=%x\n", k, sha256.Sum256(req.Secret[k]))
	}
	key := fmt.Sprintf("github-app:%x", h.Sum(nil))
	tok, _, err := is.cache.GetOrSet(ctx, key, func(ctx context.Context) (cache.Token, error) {
		t, err := client.GetToken(ctx)
		is.metrics.record(GitHub, "git", err)
		if err != nil {
			return nil, err
		}
		return appToken{t}, nil
	})
	if err != nil {
		var ge *github.ErrorResponse
		if errors.As(err, &ge) && ge.Response != nil {
			return git.ProviderCredentials{}, fmt.Errorf("%w: GitHub refused the App (HTTP %d): %s", git.ErrAuthentication,
				ge.Response.StatusCode, strings.TrimSpace(ge.Message))
		}
		return git.ProviderCredentials{}, fmt.Errorf("getting a GitHub App installation token: %w", err)
	}
	t := tok.(appToken)
	return git.ProviderCredentials{Username: githubapp.AccessTokenUsername, Password: t.Token, ExpiresAt: t.ExpiresAt}, nil
}

// Setup is what a controller's main does: an Issuer whose ServiceAccount
// reads and token requests go straight to the API server (no cache, so no
// watch of ServiceAccounts), with its metrics registered in reg.
func Setup(cfg *rest.Config, scheme *runtime.Scheme, objectLevel bool, subsystem string, reg prometheus.Registerer) (*Issuer, error) {
	// The client also requests the controller's own token for clusters
	// of the generic provider (kubeConfig.configMapRef).
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	o := Options{ObjectLevelWorkloadIdentity: objectLevel, Client: c}
	m := NewMetrics(subsystem)
	if err := reg.Register(m.Tokens); err != nil {
		return nil, err
	}
	return New(o, m)
}

// FlagUsage is the help of --object-level-workload-identity.
const FlagUsage = "Let an object with a cloud provider use the cloud identity of its spec.serviceAccountName " +
	"(Flux's ObjectLevelWorkloadIdentity feature gate): the controller requests a token for that ServiceAccount " +
	"(TokenRequest) and exchanges it. Without it, such objects are Stalled (WorkloadIdentityNotEnabled) and " +
	"every object uses the controller's own identity."

// RegisterGitProviders makes is the issuer of git repositories with
// provider github or azure, in pkg/git's credentials layer.
func RegisterGitProviders(is *Issuer) {
	git.RegisterProvider(GitHub, is)
	git.RegisterProvider(Azure, is)
}
