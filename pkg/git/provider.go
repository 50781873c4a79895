package git

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Providers other than generic give a repository short-lived credentials
// instead of the Secret's: a GitHub App's installation token, an Azure
// DevOps token of a workload identity. This package only knows how to ask
// for them: the providers themselves (pkg/cloudauth) bring cloud SDKs that
// the programs which do not need them (tk-image) must not carry, so a
// controller registers them at start.

// ProviderGeneric is the provider of credentials read from the Secret as
// they are, and of no credentials at all.
const ProviderGeneric = "generic"

// ProviderRequest is what a provider is asked for.
type ProviderRequest struct {
	// Provider is the repository's provider, e.g. "github" or "azure".
	Provider string
	// URL is the repository's.
	URL string
	// Namespace is where the repository's object (automation, job) is:
	// where its Secret and ServiceAccount are read.
	Namespace string
	// ServiceAccountName, when set, is the ServiceAccount whose cloud
	// identity is used instead of the controller's.
	ServiceAccountName string
	// Secret is the credentials Secret's data (a GitHub App's keys); nil
	// when the repository names none.
	Secret map[string][]byte
	// ProxyURL is the proxy of the repository, for the provider's own
	// calls; empty for none (then the environment's).
	ProxyURL string
	// CAPEM is the Secret's ca.crt, which GitHub Enterprise's API needs
	// as its git server does.
	CAPEM []byte
}

// ProviderCredentials are credentials a provider issued, valid until
// ExpiresAt.
type ProviderCredentials struct {
	Username, Password, BearerToken string
	ExpiresAt                       time.Time
}

// CredentialProvider issues credentials for repositories. It is asked
// before every network operation (a long job's push comes long after its
// fetch), so it must cache what it issues until shortly before expiry.
// Errors wrap ErrInvalidCredentials when the request cannot work (a
// missing key, a malformed private key) and ErrAuthentication when the
// provider refused; they never hold a secret.
type CredentialProvider interface {
	GitCredentials(ctx context.Context, req ProviderRequest) (ProviderCredentials, error)
}

var (
	providersMu sync.RWMutex
	providers   = map[string]CredentialProvider{}
)

// RegisterProvider makes a provider available to every repository with
// that provider name; nil removes it.
func RegisterProvider(name string, p CredentialProvider) {
	providersMu.Lock()
	defer providersMu.Unlock()
	if p == nil {
		delete(providers, name)
		return
	}
	providers[name] = p
}

func lookupProvider(name string) CredentialProvider {
	providersMu.RLock()
	defer providersMu.RUnlock()
	return providers[name]
}

// Remote is a repository as its spec names it.
type Remote struct {
	URL string
	// SecretName and ProxySecretName name Secrets of the namespace, or
	// are empty.
	SecretName, ProxySecretName string
	// Provider is "", generic, or a registered provider's name.
	Provider string
	// ServiceAccountName, with a provider, is the identity to use
	// instead of the controller's.
	ServiceAccountName string
}

// Secrets are what a repository's Secrets hold, read by the caller (from
// the Kubernetes API: pkg/git/gitsecret), so that this package takes plain
// values and an embedder of the engine needs no Kubernetes.
type Secrets struct {
	// Creds and Proxy are the credentials and proxy Secrets' data, nil for
	// a Secret the repository does not name.
	Creds, Proxy map[string][]byte
	// ArgoCD says Creds is an Argo CD repository Secret's data (keys of
	// Argo CD's, mapped by FromArgoCD); KnownHosts and CA are then what
	// Argo CD keeps beside it for the URL, in its ConfigMaps.
	ArgoCD         bool
	KnownHosts, CA []byte
}

// NewRemoteAuth builds the Auth of repository r from its Secrets by the
// rules of AuthFromSecrets (and of FromArgoCD for an Argo CD Secret). With
// a provider, the Auth asks it for fresh credentials at each operation
// (Fresh), and has been checked to get some. namespace is the one of the
// object naming r: where a provider reads its ServiceAccount.
func NewRemoteAuth(ctx context.Context, namespace string, r Remote, s Secrets) (*Auth, error) {
	creds, proxy := s.Creds, s.Proxy
	if s.ArgoCD {
		m, err := FromArgoCD(creds, s.KnownHosts, s.CA)
		if err != nil {
			return nil, err
		}
		creds = m.Creds
		if proxy == nil {
			proxy = m.Proxy
		}
		if r.Provider == "" {
			r.Provider = m.Provider
		}
	}
	generic := r.Provider == "" || r.Provider == ProviderGeneric
	if generic && r.ServiceAccountName != "" {
		return nil, fmt.Errorf("%w: serviceAccountName needs a provider (github or azure)", ErrInvalidCredentials)
	}
	src := creds
	if !generic {
		// The Secret's keys are the provider's (a GitHub App's), not
		// credentials to send as they are; ca.crt is still the server's.
		src = map[string][]byte{}
		if ca, ok := creds["ca.crt"]; ok {
			src["ca.crt"] = ca
		}
	}
	auth, err := AuthFromSecrets(r.URL, src, proxy)
	if err != nil || generic {
		return auth, err
	}
	ep, _ := ParseEndpoint(r.URL)
	if ep.Scheme != "https" {
		return nil, fmt.Errorf("%w: provider %s issues credentials for https:// URLs only", ErrInvalidCredentials, r.Provider)
	}
	p := lookupProvider(r.Provider)
	switch {
	case p == nil && (r.Provider == "github" || r.Provider == "azure"):
		// A known provider that this program (tk-image) did not register.
		return nil, fmt.Errorf("%w: provider %s: credentials are issued by the controllers; this program does not read cloud or GitHub App identities", ErrInvalidCredentials, r.Provider)
	case p == nil:
		return nil, fmt.Errorf("%w: provider %q is not one this program knows (generic, github, azure)", ErrInvalidCredentials, r.Provider)
	}
	auth.provider = &providerSource{p: p, req: ProviderRequest{
		Provider: r.Provider, URL: r.URL, Namespace: namespace, ServiceAccountName: r.ServiceAccountName,
		Secret: creds, ProxyURL: auth.ProxyURL, CAPEM: auth.CAPEM,
	}}
	// Fail now, with the provider's reason, rather than at the first
	// fetch: the token is cached for that fetch anyway.
	if _, err := auth.Fresh(ctx); err != nil {
		return nil, err
	}
	return auth, nil
}

// providerSource is where an Auth's credentials come from.
type providerSource struct {
	p   CredentialProvider
	req ProviderRequest
}

// Provider names the provider of a's credentials, "" for generic ones.
func (a *Auth) Provider() string {
	if a == nil || a.provider == nil {
		return ""
	}
	return a.provider.req.Provider
}

// Fresh returns a with credentials valid now: a itself when they come
// from a Secret, else a copy with the provider's current credentials
// (from its cache, or issued now when they are near expiry). Every
// network operation starts with it.
func (a *Auth) Fresh(ctx context.Context) (*Auth, error) {
	if a == nil || a.provider == nil {
		return a, nil
	}
	c, err := a.provider.p.GitCredentials(ctx, a.provider.req)
	if err != nil {
		if !errors.Is(err, ErrInvalidCredentials) && !errors.Is(err, ErrAuthentication) {
			err = fmt.Errorf("%w: %w", ErrProviderUnavailable, err)
		}
		return nil, fmt.Errorf("credentials of provider %s: %w", a.provider.req.Provider, err)
	}
	b := *a
	b.Username, b.Password, b.BearerToken = c.Username, c.Password, c.BearerToken
	return &b, nil
}

// ErrProviderUnavailable: a credentials provider could not be asked (its
// service did not answer, or answered nonsense); retrying may help.
var ErrProviderUnavailable = errors.New("credentials provider unavailable")
