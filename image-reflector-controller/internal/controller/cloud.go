package controller

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"net/url"

	"github.com/google/go-containerregistry/pkg/name"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// usesCloud reports whether the repository's credentials come from a
// cloud identity: a cloud provider, and no secretRef (which wins, as the
// credentials a user wrote down).
func usesCloud(obj *imagev1.ImageRepository) bool {
	p := obj.Spec.Provider
	return p != "" && p != "generic" && obj.Spec.SecretRef == nil
}

// cloudAccess sets a's credentials from the provider: the controller's
// cloud identity, or the ServiceAccount's. The scan key names the
// identity, not the token, so that a refreshed token neither rescans nor
// stops repositories of one image and identity sharing a scan.
func cloudAccess(ctx context.Context, cloud *cloudauth.Issuer, obj *imagev1.ImageRepository, repo name.Repository,
	chart *helmChart, proxy *url.URL, a *access, fp hash.Hash) error {
	if chart != nil {
		return conditions.Stallf(conditions.ProviderMismatchReason,
			"provider %s serves container registries; an HTTP(S) Helm repository takes provider generic", obj.Spec.Provider)
	}
	if cloud == nil {
		return fmt.Errorf("provider %s: this controller has no cloud credentials issuer", obj.Spec.Provider)
	}
	fmt.Fprintf(fp, "cloud:%s\x00sa:%s\x00", obj.Spec.Provider, obj.Spec.ServiceAccountName)
	creds, err := cloud.Registry(ctx, cloudauth.RegistryRequest{
		Provider: obj.Spec.Provider, Repository: repo.Name(),
		Namespace: obj.Namespace, ServiceAccountName: obj.Spec.ServiceAccountName, ProxyURL: proxy,
	})
	switch {
	case errors.Is(err, cloudauth.ErrProviderMismatch):
		return conditions.Stall(conditions.ProviderMismatchReason, err)
	case errors.Is(err, cloudauth.ErrWorkloadIdentityDisabled):
		return conditions.Stall(conditions.WorkloadIdentityNotEnabledReason, err)
	case err != nil:
		return authFailed(fmt.Errorf("provider %s: %w", obj.Spec.Provider, err))
	}
	a.opts.Auth = creds
	a.secrets = append(a.secrets, creds.Secret)
	return nil
}
