package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testcloud"
	"toolkit.dev/image-toolkit/pkg/testregistry"
)

// installCloud starts the clouds' stand-in and points the SDKs' clients
// and the registry transports at it for the test.
func installCloud(t *testing.T) *testcloud.Cloud {
	cloud := testcloud.New(t)
	cloud.Install(t)
	dial := cloud.DialContext(nil)
	testDial.Store(&dial)
	t.Cleanup(func() { testDial.Store(nil) })
	return cloud
}

// controllerIRSA gives the process the environment EKS's pod identity
// webhook gives the controller's pod (IRSA), and nothing of the machine.
func controllerIRSA(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	// The projected token's shape; STS here checks no signature.
	if err := os.WriteFile(token, []byte("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjb250cm9sbGVyIn0.c2ln"), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/image-reflector", "AWS_WEB_IDENTITY_TOKEN_FILE": token,
		"AWS_REGION": "us-east-1", "AWS_CONFIG_FILE": filepath.Join(dir, "none"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "none"), "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_CA_BUNDLE": "",
	} {
		t.Setenv(k, v)
	}
	// An AWS SDK given an *http.Client cannot add a CA bundle.
	os.Unsetenv("AWS_CA_BUNDLE")
}

// TestCloudProviderECR is a protocol test through the reconciler and a
// real API server: an ImageRepository with provider aws scans an ECR
// registry (a real registry behind the stand-in, requiring exactly the
// password ECR issued) with credentials from the controller's identity
// (IRSA: STS AssumeRoleWithWebIdentity, then ECR GetAuthorizationToken);
// a second scan reuses the cached credentials; with serviceAccountName,
// the ServiceAccount's token is requested from the real kube-apiserver
// (TokenRequest) and exchanged for its annotated role; a provider that
// does not serve the registry is Stalled without any exchange.
func TestCloudProviderECR(t *testing.T) {
	ns := env.Namespace(t)
	cloud := installCloud(t)
	controllerIRSA(t)
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud-ca", Namespace: ns},
		Data: map[string][]byte{"ca.crt": cloud.CAPEM}}
	create(t, caSecret)

	ecrRepo := func(name, path string, mutate func(*imagev1.ImageRepository)) *imagev1.ImageRepository {
		return newRepository(ns, name, func(r *imagev1.ImageRepository) {
			r.Spec.Image = testcloud.ECRRegistry + "/" + path
			r.Spec.Provider = "aws"
			r.Spec.Interval = metav1.Duration{Duration: time.Hour}
			// The stand-in's CA; a real ECR's is in the system's trust.
			r.Spec.CertSecretRef = &meta.LocalObjectReference{Name: caSecret.Name}
			if mutate != nil {
				mutate(r)
			}
		})
	}

	t.Run("controller identity", func(t *testing.T) {
		n := cloud.Calls(testcloud.CallECR) + 1
		reg := testregistry.New(t, testregistry.Options{Username: "AWS", Password: testcloud.ECRPassword(n)})
		reg.PushTags(t, "team/app", []string{"1.0.0", "1.1.0"})
		cloud.Registry = reg.Host
		obj := ecrRepo("ecr", "team/app", nil)
		create(t, obj)
		cond := waitReason(t, obj, conditions.SucceededReason)
		if obj.Status.LastScanResult == nil || obj.Status.LastScanResult.TagCount != 2 {
			t.Fatalf("scan: %s, %+v", cond.Message, obj.Status.LastScanResult)
		}
		sts, ecr, lists := cloud.Calls(testcloud.CallSTS), cloud.Calls(testcloud.CallECR), reg.TagListRequests()
		requestReconcile(t, obj, "again")
		testenvEventually(t, func() bool { return reg.TagListRequests() > lists })
		waitReason(t, obj, conditions.SucceededReason)
		if cloud.Calls(testcloud.CallSTS) != sts || cloud.Calls(testcloud.CallECR) != ecr {
			t.Errorf("the second scan exchanged tokens again: STS %d→%d, ECR %d→%d", sts, cloud.Calls(testcloud.CallSTS), ecr, cloud.Calls(testcloud.CallECR))
		}
		if roles := cloud.AssumedRoles(); len(roles) == 0 || roles[len(roles)-1] != "arn:aws:iam::123456789012:role/image-reflector" {
			t.Errorf("assumed roles %v, want the controller's", roles)
		}
		if strings.Contains(cond.Message, testcloud.ECRPassword(n)) {
			t.Error("the password is in the message")
		}
	})

	t.Run("ServiceAccount identity", func(t *testing.T) {
		n := cloud.Calls(testcloud.CallECR) + 1
		reg := testregistry.New(t, testregistry.Options{Username: "AWS", Password: testcloud.ECRPassword(n)})
		reg.PushTags(t, "team/app", []string{"2.0.0"})
		cloud.Registry = reg.Host
		const role = "arn:aws:iam::123456789012:role/team-puller"
		create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "puller", Namespace: ns,
			Annotations: map[string]string{"eks.amazonaws.com/role-arn": role}}})
		obj := ecrRepo("ecr-sa", "team/app", func(r *imagev1.ImageRepository) { r.Spec.ServiceAccountName = "puller" })
		create(t, obj)
		cond := waitReason(t, obj, conditions.SucceededReason)
		if obj.Status.LastScanResult == nil || obj.Status.LastScanResult.TagCount != 1 {
			t.Fatalf("scan: %s, %+v", cond.Message, obj.Status.LastScanResult)
		}
		if roles := cloud.AssumedRoles(); roles[len(roles)-1] != role {
			t.Errorf("assumed roles %v, want the ServiceAccount's last", roles)
		}
	})

	t.Run("ServiceAccount without role", func(t *testing.T) {
		create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}})
		obj := ecrRepo("ecr-plain", "team/app", func(r *imagev1.ImageRepository) { r.Spec.ServiceAccountName = "plain" })
		create(t, obj)
		cond := waitReason(t, obj, conditions.AuthenticationFailedReason)
		if !strings.Contains(cond.Message, "eks.amazonaws.com/role-arn") {
			t.Errorf("message %q does not name the missing annotation", cond.Message)
		}
	})

	t.Run("provider mismatch", func(t *testing.T) {
		sts := cloud.Calls(testcloud.CallSTS)
		obj := newRepository(ns, "ghcr", func(r *imagev1.ImageRepository) {
			r.Spec.Image = "ghcr.io/org/app"
			r.Spec.Provider = "aws"
		})
		create(t, obj)
		cond := waitReason(t, obj, conditions.ProviderMismatchReason)
		stalled := conditions.Get(obj, conditions.StalledCondition)
		if stalled == nil || stalled.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "provider aws does not serve registry ghcr.io") {
			t.Errorf("stalled %v: %s", stalled, cond.Message)
		}
		if cloud.Calls(testcloud.CallSTS) != sts {
			t.Error("a mismatch made a token exchange")
		}
	})
}

func testenvEventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
