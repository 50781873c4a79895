package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

func helmRepoFor(ns, name, chartURL string, mutate ...func(*imagev1.ImageRepository)) *imagev1.ImageRepository {
	return newRepository(ns, name, func(r *imagev1.ImageRepository) {
		r.Spec.Image = chartURL
		r.Spec.Interval = metav1.Duration{Duration: time.Hour}
		for _, m := range mutate {
			m(r)
		}
	})
}

func withSecret(name string) func(*imagev1.ImageRepository) {
	return func(r *imagev1.ImageRepository) { r.Spec.SecretRef = &meta.LocalObjectReference{Name: name} }
}

func withCerts(name string) func(*imagev1.ImageRepository) {
	return func(r *imagev1.ImageRepository) { r.Spec.CertSecretRef = &meta.LocalObjectReference{Name: name} }
}

// A chart of an HTTPS Helm repository behind basic authentication, named
// by spec.image https://REPOSITORY/CHART, is scanned from its index.yaml
// into the tag store (versions as tags, build metadata and all), and an
// ImagePolicy picks its latest version into latestRef (name: the chart
// URL as written, tag: the version); a new version in the index moves it.
// The index's created times serve minimumAge source created with no
// other request.
func TestHelmChartScanAndSelect(t *testing.T) {
	h := testregistry.NewHelmRepo(t, testregistry.HelmOptions{TLS: true, Username: "reader", Password: "s3cret-pass"})
	h.AddVersions("podinfo", "6.0.0", "6.1.0", "6.2.0+build.1")
	h.AddVersions("nginx", "1.0.0")
	ns := namespace(t)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "helm-creds", Namespace: ns}, Type: corev1.SecretTypeBasicAuth,
		Data: map[string][]byte{"username": []byte("reader"), "password": []byte("s3cret-pass")}}
	certs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "helm-ca", Namespace: ns}, Data: map[string][]byte{"ca.crt": h.CAPEM}}
	repo := helmRepoFor(ns, "podinfo", h.ChartURL("podinfo"), withSecret("helm-creds"), withCerts("helm-ca"))
	create(t, creds, certs, repo)
	if c := waitReason(t, repo, conditions.SucceededReason); c.Message != "successful scan: found 3 tags" {
		t.Errorf("message %q", c.Message)
	}
	if got, want := repo.Status.CanonicalImageName, h.ChartURL("podinfo"); got != want {
		t.Errorf("canonicalImageName %q, want %q", got, want)
	}

	latest := policyFor(ns, "latest", "podinfo", semverChoice(">=6.0.0"))
	stable := policyFor(ns, "stable", "podinfo", semverChoice("~6.1"))
	// Versions are an hour apart, the newest now: 2h of soak time picks
	// 6.0.0 from the index's created times alone.
	soaked := policyFor(ns, "soaked", "podinfo", semverChoice(">=6.0.0"))
	soaked.Spec.MinimumAge = &imagev1.MinimumAge{Duration: metav1.Duration{Duration: 2 * time.Hour}, Source: imagev1.AgeCreated}
	create(t, latest, stable, soaked)
	for _, tc := range []struct {
		p   *imagev1.ImagePolicy
		tag string
	}{{latest, "6.2.0+build.1"}, {stable, "6.1.0"}, {soaked, "6.0.0"}} {
		waitReason(t, tc.p, conditions.SucceededReason)
		want := meta.ImageRef{Name: h.ChartURL("podinfo"), Tag: tc.tag}
		if got := tc.p.Status.LatestRef; got == nil || *got != want {
			t.Errorf("%s: latestRef %+v, want %+v", tc.p.Name, got, want)
		}
	}

	h.AddVersions("podinfo", "6.3.0")
	requestReconcile(t, repo, "new-version")
	waitFor := func() bool {
		waitReason(t, latest, conditions.SucceededReason)
		return latest.Status.LatestRef.Tag == "6.3.0"
	}
	deadline := time.Now().Add(20 * time.Second)
	for !waitFor() {
		if time.Now().After(deadline) {
			t.Fatalf("latestRef %+v after a new version", latest.Status.LatestRef)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// What a chart of a Helm repository cannot do is refused with a reason
// that says why: each spec.image that is not http(s)://REPOSITORY/CHART
// and each registry-only option is Stalled (ImageURLInvalid), wrong
// credentials are AuthenticationFailed, an unverified certificate
// ScanFailed, a chart the index lacks ChartNotFound, a body that is no
// index InvalidHelmIndex; a policy asking for a digest or a platform of a
// chart is Stalled (InvalidPolicy).
func TestHelmChartRefusals(t *testing.T) {
	h := testregistry.NewHelmRepo(t, testregistry.HelmOptions{TLS: true, Username: "reader", Password: "s3cret-pass"})
	h.AddVersions("podinfo", "1.0.0")
	broken := testregistry.NewHelmRepo(t, testregistry.HelmOptions{})
	broken.SetBody([]byte("<html><body>Not a chart repository</body></html>\n"))
	ns := namespace(t)
	create(t,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wrong", Namespace: ns},
			Data: map[string][]byte{"username": []byte("reader"), "password": []byte("wrong-pass")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "right", Namespace: ns},
			Data: map[string][]byte{"username": []byte("reader"), "password": []byte("s3cret-pass")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "docker", Namespace: ns}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: ns}, Data: map[string][]byte{"ca.crt": h.CAPEM}})

	tests := []struct {
		name, image string
		mutate      []func(*imagev1.ImageRepository)
		reason      string
		stalled     bool
		says        string
	}{
		{"no chart", "https://charts.example.com/", nil, imagev1.ImageURLInvalidReason, true, "does not end in a chart name"},
		{"plain http", "http://charts.example.com/app", nil, imagev1.ImageURLInvalidReason, true, "set spec.insecure"},
		{"credentials in url", "https://u:p@charts.example.com/app", nil, imagev1.ImageURLInvalidReason, true, "spec.secretRef"},
		{"query", "https://charts.example.com/app?x=1", nil, imagev1.ImageURLInvalidReason, true, "query or fragment"},
		{"oci scheme", "oci://ghcr.io/org/charts/app", nil, imagev1.ImageURLInvalidReason, true, "give ghcr.io/org/charts/app"},
		{"service account", h.ChartURL("podinfo"), []func(*imagev1.ImageRepository){withCerts("ca"),
			func(r *imagev1.ImageRepository) { r.Spec.ServiceAccountName = "default" }}, imagev1.ImageURLInvalidReason, true, "serviceAccountName"},
		{"wrong password", h.ChartURL("podinfo"), []func(*imagev1.ImageRepository){withCerts("ca"), withSecret("wrong")},
			conditions.AuthenticationFailedReason, false, "401"},
		{"dockerconfigjson secret", h.ChartURL("podinfo"), []func(*imagev1.ImageRepository){withCerts("ca"), withSecret("docker")},
			conditions.AuthenticationFailedReason, false, "takes username and password"},
		{"unverified certificate", h.ChartURL("podinfo"), []func(*imagev1.ImageRepository){withSecret("right")},
			imagev1.ScanFailedReason, false, "certificate"},
		{"chart not listed", h.ChartURL("nginx"), []func(*imagev1.ImageRepository){withCerts("ca"), withSecret("right")},
			imagev1.ChartNotFoundReason, false, `chart "nginx" is not in`},
		{"not an index", broken.ChartURL("podinfo"), []func(*imagev1.ImageRepository){func(r *imagev1.ImageRepository) { r.Spec.Insecure = true }},
			imagev1.InvalidHelmIndexReason, false, "not a valid Helm repository index"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := helmRepoFor(ns, strings.ReplaceAll(tc.name, " ", "-"), tc.image, tc.mutate...)
			create(t, r)
			c := waitReason(t, r, tc.reason)
			if conditions.IsTrue(r, conditions.StalledCondition) != tc.stalled {
				t.Errorf("stalled = %t, want %t", !tc.stalled, tc.stalled)
			}
			if !strings.Contains(c.Message, tc.says) || strings.Contains(c.Message, "wrong-pass") {
				t.Errorf("message %q: want it to say %q, and never the password", c.Message, tc.says)
			}
		})
	}

	good := helmRepoFor(ns, "good", h.ChartURL("podinfo"), withCerts("ca"), withSecret("right"))
	create(t, good)
	waitReason(t, good, conditions.SucceededReason)
	for _, tc := range []struct {
		name   string
		mutate func(*imagev1.ImagePolicy)
		says   string
	}{
		{"digest", func(p *imagev1.ImagePolicy) { p.Spec.DigestReflectionPolicy = imagev1.ReflectIfNotPresent }, "no manifest digests; use Never"},
		{"platform", func(p *imagev1.ImagePolicy) { p.Spec.Platform = "linux/amd64" }, "has no platforms"},
	} {
		p := policyFor(ns, tc.name, "good", semverChoice("*"))
		tc.mutate(p)
		create(t, p)
		c := waitReason(t, p, imagev1.InvalidPolicyReason)
		if !conditions.IsTrue(p, conditions.StalledCondition) || !strings.Contains(c.Message, tc.says) {
			t.Errorf("%s: %q, stalled %t; want Stalled saying %q", tc.name, c.Message, conditions.IsTrue(p, conditions.StalledCondition), tc.says)
		}
	}
}
