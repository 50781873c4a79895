package cloudauth

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/fluxcd/pkg/auth"

	"toolkit.dev/image-toolkit/pkg/testing/testcloud"
)

// TestAWSCABundle is a protocol test of AWS_CA_BUNDLE: with the stand-in's
// CA only in the bundle (not in the process's trust), the controller's
// exchange (STS AssumeRoleWithWebIdentity through the SDK's default
// configuration, then ECR GetAuthorizationToken) and a ServiceAccount's
// (STS called directly) succeed; without the bundle, or with another
// CA's, they fail on the certificate, so the trust came from the bundle;
// a bundle that cannot be read is an error naming the variable.
func TestAWSCABundle(t *testing.T) {
	cloud := testcloud.New(t)
	cloud.Install(t)
	controllerIdentity(t, cloud, AWS)
	// The stand-in's host names still reach it, but its CA is no longer
	// trusted by the process: only a bundle can make it so.
	http.DefaultTransport.(*http.Transport).TLSClientConfig = nil
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := testcloud.New(t) // another CA
	tests := []struct {
		name, bundle, wantErr string
	}{
		{name: "the stand-in's CA in the bundle", bundle: write("ca.pem", cloud.CAPEM)},
		{name: "no bundle", wantErr: "certificate"},
		{name: "another CA in the bundle", bundle: write("other.pem", other.CAPEM), wantErr: "certificate"},
		{name: "no such file", bundle: filepath.Join(dir, "missing.pem"), wantErr: "AWS_CA_BUNDLE"},
		{name: "no certificate in the file", bundle: write("empty.pem", []byte("nothing\n")), wantErr: "AWS_CA_BUNDLE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bundle != "" {
				t.Setenv("AWS_CA_BUNDLE", tt.bundle)
			}
			check := func(what string, err error) {
				t.Helper()
				if tt.wantErr == "" && err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
					t.Fatalf("%s: %v, want an error with %q", what, err, tt.wantErr)
				}
			}
			// The controller's identity, through the Issuer.
			is, err := New(Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			n := cloud.Calls(testcloud.CallECR) + 1
			creds, err := is.Registry(context.Background(), RegistryRequest{Provider: AWS, Repository: testcloud.ECRRegistry + "/podinfo"})
			check("controller identity", err)
			if err == nil && creds.Secret != testcloud.ECRPassword(n) {
				t.Errorf("secret %q, want %q", creds.Secret, testcloud.ECRPassword(n))
			}
			// A ServiceAccount's: the library calls STS with its own client.
			o := auth.Options{}
			role, session, token := "arn:aws:iam::123456789012:role/team", "team", saToken
			_, err = awsSDK{}.AssumeRoleWithWebIdentity(context.Background(), &sts.AssumeRoleWithWebIdentityInput{
				RoleArn: &role, RoleSessionName: &session, WebIdentityToken: &token,
			}, sts.Options{Region: "us-east-1", HTTPClient: o.GetHTTPClient()})
			check("ServiceAccount identity", err)
		})
	}
}
