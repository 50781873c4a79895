package testcloud

import (
	"os"
	"path/filepath"
	"testing"
)

// ControllerIRSA gives the process the environment EKS's pod identity
// webhook gives a controller's pod (IRSA: a role ARN and a projected
// token file), and nothing of the machine's AWS configuration.
func ControllerIRSA(t testing.TB, role string) {
	t.Helper()
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	// The projected token's shape; STS here checks no signature.
	if err := os.WriteFile(token, []byte("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjb250cm9sbGVyIn0.c2ln"), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"AWS_ROLE_ARN": role, "AWS_WEB_IDENTITY_TOKEN_FILE": token,
		"AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": filepath.Join(dir, "none"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "none"), "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_CA_BUNDLE": "",
	} {
		t.Setenv(k, v)
	}
	// A bundle of the machine's would replace the trust of the
	// stand-in's CA (pkg/cloudauth's TestAWSCABundle tests it).
	os.Unsetenv("AWS_CA_BUNDLE")
}
