package cloudauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/fluxcd/pkg/auth"
	"github.com/fluxcd/pkg/auth/generic"
	authutils "github.com/fluxcd/pkg/auth/utils"
	"k8s.io/client-go/rest"
)

// Keys of a kubeConfig.configMapRef ConfigMap, as Flux 2.6+ reads them
// (fluxcd/pkg/apis/meta's KubeConfigKey*).
const (
	ClusterKeyProvider       = "provider"
	ClusterKeyCluster        = "cluster"
	ClusterKeyAddress        = "address"
	ClusterKeyCACert         = "ca.crt"
	ClusterKeyAudiences      = "audiences"
	ClusterKeyServiceAccount = "serviceAccountName"
)

// clusterProviders are the providers that reach a cluster: EKS, AKS, GKE,
// and generic, a ServiceAccount token the remote API server trusts by
// its OIDC issuer.
var clusterProviders = []string{AWS, Azure, GCP, generic.ProviderName}

// ErrBadClusterConfig: the ConfigMap cannot reach a cluster as written;
// no retry helps until it changes.
var ErrBadClusterConfig = errors.New("the ConfigMap does not say how to reach a cluster")

// ClusterRequest is a cluster to reach with a cloud identity: the data of
// a kubeConfig.configMapRef ConfigMap, in the namespace of the object
// naming it (the namespace of its ServiceAccount).
type ClusterRequest struct {
	Namespace string
	Data      map[string]string
}

// CheckCluster refuses a ConfigMap that cannot reach a cluster whatever
// the cloud says: an unknown provider, generic without an address, a
// cloud provider with neither cluster nor address, an unknown key.
func CheckCluster(data map[string]string) error {
	known := []string{ClusterKeyProvider, ClusterKeyCluster, ClusterKeyAddress, ClusterKeyCACert, ClusterKeyAudiences, ClusterKeyServiceAccount}
	var unknown []string
	for k := range data {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	p := data[ClusterKeyProvider]
	switch {
	case len(unknown) > 0:
		return fmt.Errorf("%w: unknown keys %s (known: %s)", ErrBadClusterConfig, strings.Join(unknown, ", "), strings.Join(known, ", "))
	case p == "":
		return fmt.Errorf("%w: no %q key (one of %s)", ErrBadClusterConfig, ClusterKeyProvider, strings.Join(clusterProviders, ", "))
	case !slices.Contains(clusterProviders, p):
		return fmt.Errorf("%w: provider %q is not one of %s", ErrBadClusterConfig, p, strings.Join(clusterProviders, ", "))
	case p == generic.ProviderName && data[ClusterKeyAddress] == "":
		return fmt.Errorf("%w: provider generic needs the %q of the API server", ErrBadClusterConfig, ClusterKeyAddress)
	case p == AWS && data[ClusterKeyCluster] == "":
		return fmt.Errorf("%w: provider aws needs the %q ARN (it names the region)", ErrBadClusterConfig, ClusterKeyCluster)
	case p != generic.ProviderName && data[ClusterKeyCluster] == "" && (data[ClusterKeyAddress] == "" || data[ClusterKeyCACert] == ""):
		return fmt.Errorf("%w: provider %s needs the %q resource name, or both %q and %q", ErrBadClusterConfig, p, ClusterKeyCluster, ClusterKeyAddress, ClusterKeyCACert)
	}
	if a := data[ClusterKeyAddress]; a != "" {
		if _, err := auth.ParseClusterAddress(a); err != nil {
			return fmt.Errorf("%w: %v", ErrBadClusterConfig, err)
		}
	}
	return nil
}

// RESTConfig returns the client configuration of the cluster req names,
// authenticated by the cloud identity of the controller, or of the
// request's ServiceAccount with object-level workload identity. Its
// transport asks the issuer for the token on each request: tokens are
// cached until 80% of their lifetime, so a watch that lives for hours
// renews its credentials as they age. Errors are ErrBadClusterConfig,
// ErrWorkloadIdentityDisabled, or the provider's (retry later).
func (is *Issuer) RESTConfig(ctx context.Context, req ClusterRequest) (*rest.Config, error) {
	if err := CheckCluster(req.Data); err != nil {
		return nil, err
	}
	sa := req.Data[ClusterKeyServiceAccount]
	if sa != "" && !is.opts.ObjectLevelWorkloadIdentity {
		return nil, fmt.Errorf("%s %s: %w", ClusterKeyServiceAccount, sa, ErrWorkloadIdentityDisabled)
	}
	provider, err := authutils.ProviderByName[auth.RESTConfigProvider](req.Data[ClusterKeyProvider])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadClusterConfig, err)
	}
	opts := is.options(req.Namespace, sa, nil)
	if is.opts.Client != nil && sa == "" {
		// The generic provider requests the controller's own token.
		opts = append(opts, auth.WithClient(is.opts.Client))
	}
	if v := req.Data[ClusterKeyCluster]; v != "" {
		opts = append(opts, auth.WithClusterResource(v))
	}
	if v := req.Data[ClusterKeyAddress]; v != "" {
		opts = append(opts, auth.WithClusterAddress(v))
	}
	if v := req.Data[ClusterKeyCACert]; v != "" {
		opts = append(opts, auth.WithCAData(v))
	}
	var audiences []string
	for a := range strings.SplitSeq(req.Data[ClusterKeyAudiences], "\n") {
		if a = strings.TrimSpace(a); a != "" {
			audiences = append(audiences, a)
		}
	}
	if len(audiences) > 0 {
		opts = append(opts, auth.WithAudiences(audiences...))
	}
	get := func(ctx context.Context) (*auth.RESTConfig, error) {
		ctx, cancel := context.WithTimeout(ctx, is.opts.Timeout)
		defer cancel()
		c, err := auth.GetRESTConfig(ctx, provider, opts...)
		is.metrics.record(req.Data[ClusterKeyProvider], "cluster", err)
		return c, err
	}
	first, err := get(ctx)
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{Host: first.Host, TLSClientConfig: rest.TLSClientConfig{CAData: first.CAData}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &bearer{next: rt, get: get} })
	return cfg, nil
}

// bearer sets each request's token from the issuer's cache.
type bearer struct {
	next http.RoundTripper
	get  func(context.Context) (*auth.RESTConfig, error)
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	c, err := b.get(r.Context())
	if err != nil {
		return nil, fmt.Errorf("getting a token for the cluster: %w", err)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+c.BearerToken)
	return b.next.RoundTrip(r)
}
