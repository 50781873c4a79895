package cloudauth

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// A ConfigMap that cannot reach a cluster as written is refused before any
// cloud is asked, saying which key is wrong; one that can is left to the
// provider. (The exchanges with EKS, AKS and GKE are fluxcd/pkg/auth's;
// the generic provider is tested against a real second API server in the
// reflector's TestPromotionReachesAnotherClusterWithAWorkloadIdentity.)
func TestClusterConfigMapsAreCheckedBeforeAnyCloudIsAsked(t *testing.T) {
	const arn = "arn:aws:eks:eu-central-1:123456789012:cluster/dev"
	for _, tt := range []struct {
		data map[string]string
		says string // "" when accepted
	}{
		{map[string]string{"provider": "aws", "cluster": arn}, ""},
		{map[string]string{"provider": "gcp", "cluster": "projects/p/locations/l/clusters/dev"}, ""},
		{map[string]string{"provider": "azure", "address": "https://dev.example.com", "ca.crt": "PEM"}, ""},
		{map[string]string{"provider": "generic", "address": "https://dev.example.com:6443", "audiences": "a\nb", "serviceAccountName": "sa"}, ""},
		{map[string]string{}, `no "provider" key`},
		{map[string]string{"provider": "digitalocean", "cluster": "x"}, `provider "digitalocean" is not one of aws, azure, gcp, generic`},
		{map[string]string{"provider": "generic"}, `needs the "address"`},
		{map[string]string{"provider": "aws", "address": "https://x", "ca.crt": "PEM"}, `needs the "cluster" ARN`},
		{map[string]string{"provider": "gcp", "address": "https://x"}, `or both "address" and "ca.crt"`},
		{map[string]string{"provider": "generic", "address": "http://dev.example.com"}, "must use https"},
		{map[string]string{"provider": "aws", "cluster": arn, "region": "eu"}, "unknown keys region"},
	} {
		err := CheckCluster(tt.data)
		switch {
		case tt.says == "" && err != nil:
			t.Errorf("%v: %v", tt.data, err)
		case tt.says != "" && (err == nil || !errors.Is(err, ErrBadClusterConfig) || !strings.Contains(err.Error(), tt.says)):
			t.Errorf("%v: %v, want ErrBadClusterConfig saying %q", tt.data, err, tt.says)
		}
	}
	is, err := New(Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = is.RESTConfig(context.Background(), ClusterRequest{Namespace: "apps", Data: map[string]string{"provider": "generic", "address": "https://dev.example.com", "serviceAccountName": "promoter"}})
	if !errors.Is(err, ErrWorkloadIdentityDisabled) {
		t.Errorf("a serviceAccountName without object-level workload identity: %v", err)
	}
}
