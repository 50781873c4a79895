package healthwatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/cloudauth"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// A kubeConfig.configMapRef reaches a cluster with a cloud identity, as
// Flux 2.6+ does: a ConfigMap says which cluster (provider, cluster,
// address, ca.crt, audiences, serviceAccountName) and pkg/cloudauth gets
// a token for it (EKS, AKS, GKE, or a ServiceAccount token the remote API
// server trusts by its OIDC issuer), renewed as it ages. No Secret holds
// a credential, and no program runs.

// cloudConfig reads ref's ConfigMap and makes the client configuration of
// its cluster. The cluster is identified by the ConfigMap's data and the
// reader's namespace (a serviceAccountName is one of that namespace).
func (w *Watches) cloudConfig(ctx context.Context, namespace string, ref *imagev1.HealthObjectReference) ([]byte, *rest.Config, error) {
	name := ref.KubeConfig.ConfigMapRef.Name
	what := fmt.Sprintf("healthOf %s/%s: kubeConfig ConfigMap %s/%s", ref.Kind, ref.Name, namespace, name)
	if w.Cloud == nil {
		return nil, nil, conditions.Stallf(imagev1.InvalidPolicyReason, "%s: this controller reaches no cluster with a cloud identity", what)
	}
	cm := &corev1.ConfigMap{}
	if err := w.Secrets.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, conditions.Retryf(conditions.DependencyNotReadyReason, "%s not found", what).After(time.Minute)
		}
		return nil, nil, err
	}
	cfg, err := w.Cloud.RESTConfig(ctx, cloudauth.ClusterRequest{Namespace: namespace, Data: cm.Data})
	switch {
	case errors.Is(err, cloudauth.ErrBadClusterConfig):
		return nil, nil, conditions.Retryf(imagev1.InvalidPolicyReason, "%s: %v", what, err).After(time.Minute)
	case errors.Is(err, cloudauth.ErrWorkloadIdentityDisabled):
		return nil, nil, conditions.Retryf(conditions.WorkloadIdentityNotEnabledReason, "%s: %v", what, err).After(time.Minute)
	case err != nil:
		return nil, nil, conditions.Retryf(conditions.AccessDeniedReason, "%s: no credentials for the cluster: %v", what, err).After(time.Minute)
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	cfg.QPS, cfg.Burst = 20, 40
	cfg.UserAgent = "image-toolkit-healthwatch"
	keys := make([]string, 0, len(cm.Data))
	for k, v := range cm.Data {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return []byte("cloud\x00" + namespace + "\x00" + strings.Join(keys, "\x00")), cfg, nil
}
