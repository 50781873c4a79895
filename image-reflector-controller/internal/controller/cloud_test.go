package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testcloud"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
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

// controllerIRSA gives the process the controller's IRSA environment.
func controllerIRSA(t *testing.T) {
	testcloud.ControllerIRSA(t, "arn:aws:iam::123456789012:role/image-reflector")
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
	ns := namespace(t)
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

// controllerGCP gives the process what GKE gives the controller's pod: a
// metadata server (here the stand-in's), and nothing of the machine.
func controllerGCP(t *testing.T, cloud *testcloud.Cloud) {
	dir := t.TempDir()
	for k, v := range map[string]string{"GCE_METADATA_HOST": cloud.MetadataHost, "GOOGLE_APPLICATION_CREDENTIALS": "",
		"CLOUDSDK_CONFIG": dir, "HOME": dir} {
		t.Setenv(k, v)
	}
}

// controllerAzure gives the process what Azure Workload Identity's
// webhook gives the controller's pod: the AZURE_* variables and a
// projected token file.
func controllerAzure(t *testing.T, cloud *testcloud.Cloud) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjb250cm9sbGVyIn0.c2ln"), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"AZURE_CLIENT_ID": azureControllerClient, "AZURE_TENANT_ID": testcloud.Tenant,
		"AZURE_FEDERATED_TOKEN_FILE": token, "AZURE_AUTHORITY_HOST": "https://" + testcloud.EntraHost + "/", "HOME": dir} {
		t.Setenv(k, v)
	}
}

const (
	azureControllerClient = "0b5a0a9e-3c5b-4d1e-9d55-4c0c6f1e2a11"
	azureTenantClient     = "5c1e7b2a-9f4d-4e8a-b1c3-7d2e6f9a0b44"
	gcpTenantAccount      = "team-puller@" + testcloud.GCPProject + ".iam.gserviceaccount.com"
)

// TestCloudProviderGCPAndAzure is a protocol test through the reconciler
// and a real API server, as TestCloudProviderECR is for AWS: an
// ImageRepository with provider gcp (Artifact Registry) or azure (ACR)
// scans a real registry behind the stand-in that requires exactly the
// credential the cloud issued. With the controller's identity: the GCE
// metadata server's access token (user oauth2accesstoken), or an Entra ID
// token of the workload identity exchanged at ACR's /oauth2/exchange for a
// refresh token; a second scan reuses the cached credential. With
// serviceAccountName (the suite runs with --object-level-workload-
// identity): the real kube-apiserver issues the ServiceAccount's token
// (TokenRequest) for the cloud's audience, and it is exchanged for the
// ServiceAccount's annotated identity (GKE: Google STS, then impersonation
// of iam.gke.io/gcp-service-account; Azure: Entra's client credentials
// grant with azure.workload.identity/client-id and tenant-id). A provider
// that does not serve the registry is Stalled without any exchange. It
// proves the wiring, not that a cloud accepts our requests.
func TestCloudProviderGCPAndAzure(t *testing.T) {
	ns := namespace(t)
	cloud := installCloud(t)
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud-ca", Namespace: ns},
		Data: map[string][]byte{"ca.crt": cloud.CAPEM}}
	create(t, caSecret)

	tests := []struct {
		provider string
		registry string
		identity func(*testing.T, *testcloud.Cloud)
		user     string
		// password is the credential the next controller-identity
		// exchange issues; exchanges are the endpoints it calls.
		password  func() string
		exchanges []string
		// ServiceAccount identity: its annotations, the credential the
		// next exchange issues, and the subjects the cloud must have
		// issued tokens to (sub is the ServiceAccount's).
		annotations map[string]string
		saPassword  func() string
		subjects    func(sub string) []string
		// mismatch is an image of another cloud's registry.
		mismatch string
	}{
		{
			provider: "gcp", registry: testcloud.GARRegistry, identity: controllerGCP, user: "oauth2accesstoken",
			password:    func() string { return testcloud.GCPToken(cloud.Calls(testcloud.CallMetadata) + 1) },
			exchanges:   []string{testcloud.CallMetadata},
			annotations: map[string]string{"iam.gke.io/gcp-service-account": gcpTenantAccount},
			saPassword:  func() string { return testcloud.GoogleIAMToken(cloud.Calls(testcloud.CallGoogleIAM) + 1) },
			subjects: func(sub string) []string {
				return []string{"gcp-sts aud=" + testcloud.GCPProject + ".svc.id.goog sub=" + sub, "gcp-iam " + gcpTenantAccount}
			},
			mismatch: testcloud.ACRRegistry + "/team/app",
		},
		{
			provider: "azure", registry: testcloud.ACRRegistry, identity: controllerAzure, user: testcloud.ACRUser,
			password:  func() string { return cloud.ACRRefreshToken(cloud.Calls(testcloud.CallACRExchange) + 1) },
			exchanges: []string{testcloud.CallEntra, testcloud.CallACRExchange},
			annotations: map[string]string{"azure.workload.identity/client-id": azureTenantClient,
				"azure.workload.identity/tenant-id": testcloud.Tenant},
			saPassword: func() string { return cloud.ACRRefreshToken(cloud.Calls(testcloud.CallACRExchange) + 1) },
			subjects: func(sub string) []string {
				return []string{"entra client=" + azureTenantClient + " sub=" + sub + " aud=api://AzureADTokenExchange"}
			},
			mismatch: testcloud.GARRegistry + "/" + testcloud.GCPProject + "/images/app",
		},
	}
	for _, tt := range tests {
		repo := func(name, path string, mutate func(*imagev1.ImageRepository)) *imagev1.ImageRepository {
			return newRepository(ns, tt.provider+"-"+name, func(r *imagev1.ImageRepository) {
				r.Spec.Image = tt.registry + "/" + path
				r.Spec.Provider = tt.provider
				r.Spec.Interval = metav1.Duration{Duration: time.Hour}
				// The stand-in's CA; a real registry's is in the system's trust.
				r.Spec.CertSecretRef = &meta.LocalObjectReference{Name: caSecret.Name}
				if mutate != nil {
					mutate(r)
				}
			})
		}
		calls := func() map[string]int {
			m := map[string]int{}
			for _, e := range []string{testcloud.CallMetadata, testcloud.CallEntra, testcloud.CallACRExchange,
				testcloud.CallGoogleSTS, testcloud.CallGoogleIAM} {
				m[e] = cloud.Calls(e)
			}
			return m
		}
		t.Run(tt.provider, func(t *testing.T) {
			tt.identity(t, cloud)

			t.Run("controller identity", func(t *testing.T) {
				password := tt.password()
				reg := testregistry.New(t, testregistry.Options{Username: tt.user, Password: password})
				reg.PushTags(t, testcloud.GCPProject+"/images/app", []string{"1.0.0", "1.1.0"})
				cloud.Registry = reg.Host
				before := calls()
				obj := repo("controller", testcloud.GCPProject+"/images/app", nil)
				create(t, obj)
				cond := waitReason(t, obj, conditions.SucceededReason)
				if obj.Status.LastScanResult == nil || obj.Status.LastScanResult.TagCount != 2 {
					t.Fatalf("scan: %s, %+v", cond.Message, obj.Status.LastScanResult)
				}
				after, lists := calls(), reg.TagListRequests()
				for _, e := range tt.exchanges {
					if after[e]-before[e] != 1 {
						t.Errorf("%s called %d times for the first scan, want 1", e, after[e]-before[e])
					}
				}
				requestReconcile(t, obj, "again")
				testenvEventually(t, func() bool { return reg.TagListRequests() > lists })
				waitReason(t, obj, conditions.SucceededReason)
				if again := calls(); fmt.Sprint(again) != fmt.Sprint(after) {
					t.Errorf("the second scan exchanged tokens again: %v → %v", after, again)
				}
				if strings.Contains(cond.Message, password) {
					t.Error("the credential is in the message")
				}
			})

			t.Run("ServiceAccount identity", func(t *testing.T) {
				password := tt.saPassword()
				reg := testregistry.New(t, testregistry.Options{Username: tt.user, Password: password})
				reg.PushTags(t, testcloud.GCPProject+"/images/app", []string{"2.0.0"})
				cloud.Registry = reg.Host
				create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: tt.provider + "-puller", Namespace: ns,
					Annotations: tt.annotations}})
				subjects := len(cloud.Subjects())
				obj := repo("sa", testcloud.GCPProject+"/images/app", func(r *imagev1.ImageRepository) {
					r.Spec.ServiceAccountName = tt.provider + "-puller"
				})
				create(t, obj)
				cond := waitReason(t, obj, conditions.SucceededReason)
				if obj.Status.LastScanResult == nil || obj.Status.LastScanResult.TagCount != 1 {
					t.Fatalf("scan: %s, %+v", cond.Message, obj.Status.LastScanResult)
				}
				// The token exchanged is the real API server's, for the
				// ServiceAccount and the cloud's audience.
				want := tt.subjects("system:serviceaccount:" + ns + ":" + tt.provider + "-puller")
				if got := cloud.Subjects()[subjects:]; fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("tokens issued to %q, want %q", got, want)
				}
			})

			t.Run("provider mismatch", func(t *testing.T) {
				before := calls()
				obj := newRepository(ns, tt.provider+"-mismatch", func(r *imagev1.ImageRepository) {
					r.Spec.Image = tt.mismatch
					r.Spec.Provider = tt.provider
				})
				create(t, obj)
				cond := waitReason(t, obj, conditions.ProviderMismatchReason)
				if !conditions.IsTrue(obj, conditions.StalledCondition) ||
					!strings.Contains(cond.Message, "provider "+tt.provider+" does not serve registry") {
					t.Errorf("not Stalled with the mismatch: %s", cond.Message)
				}
				if after := calls(); fmt.Sprint(after) != fmt.Sprint(before) {
					t.Errorf("a mismatch made a token exchange: %v → %v", before, after)
				}
			})
		})
	}

	// Every credential the clouds issued above stays out of what the
	// controller writes to the API: statuses and events.
	t.Run("no credential in statuses or events", func(t *testing.T) {
		var repos imagev1.ImageRepositoryList
		var events corev1.EventList
		for _, l := range []client.ObjectList{&repos, &events} {
			if err := env.Client.List(context.Background(), l, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
		}
		written, err := json.Marshal([]any{repos.Items, events.Items})
		if err != nil {
			t.Fatal(err)
		}
		tokens := cloud.IssuedTokens()
		if len(tokens) < 5 || len(repos.Items) < 6 {
			t.Fatalf("%d tokens issued, %d repositories: the tests above did not run", len(tokens), len(repos.Items))
		}
		for _, tok := range tokens {
			if strings.Contains(string(written), tok) {
				t.Errorf("credential %.12s... is in a status or an event", tok)
			}
		}
	})
}
