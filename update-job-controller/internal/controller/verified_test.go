package controller

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testcloud"
	"toolkit.dev/image-toolkit/pkg/testing/testgit"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// What was verified is what is written: a verified setter's tag is read
// again right before the commit. Where it still points to the verified
// digest the job commits; re-pushed with another image (here written by a
// tag-only marker, which alone would not notice), the job fails with
// VerifiedImageMoved and commits nothing.
func TestRunRefusesAVerifiedTagThatMoved(t *testing.T) {
	reg, srv, ns, verified := verifiedPodinfo(t)
	setVerified := func(j *updatev1.UpdateJob) {
		s := &j.Spec.Update.Setters[0]
		s.Name, s.Tag, s.Digest = reg.Repo("podinfo"), "6.5.0", verified
		s.Verified = &updatev1.VerifiedImage{ImageRepository: meta.NamespacedObjectReference{Namespace: ns, Name: "podinfo"}}
	}

	srv.CreateRepo(t, "still", map[string]string{"deploy/app.yaml": deployment})
	ok := newJob(ns, "verified-still", srv.RepoURL("still"), setVerified)
	create(t, ok)
	if got := waitFinished(t, ok); got.Status.Phase != updatev1.UpdateJobSucceeded {
		t.Fatalf("tag at the verified digest: phase %s, Ready %+v", got.Status.Phase, conditions.Get(got, conditions.ReadyCondition))
	}

	// With a platform the setter writes the platform's manifest, and the
	// tag is held to the index that verified, which lists it.
	index, per := reg.PushIndex(t, "multi", "1.0.0", time.Now(), "linux/amd64", "linux/arm64")
	create(t, &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "multi"},
		Spec: imagev1.ImageRepositorySpec{Image: reg.Repo("multi"), Insecure: true, Interval: metav1.Duration{Duration: time.Hour}}})
	srv.CreateRepo(t, "platform", map[string]string{"deploy/app.yaml": deployment})
	arm := newJob(ns, "verified-platform", srv.RepoURL("platform"), func(j *updatev1.UpdateJob) {
		s := &j.Spec.Update.Setters[0]
		s.Name, s.Tag, s.Digest = reg.Repo("multi"), "1.0.0", per["linux/arm64"]
		s.Verified = &updatev1.VerifiedImage{ImageRepository: meta.NamespacedObjectReference{Namespace: ns, Name: "multi"}, Digest: index}
	})
	create(t, arm)
	if got := waitFinished(t, arm); got.Status.Phase != updatev1.UpdateJobSucceeded {
		t.Fatalf("platform of a verified index: phase %s, Ready %+v", got.Status.Phase, conditions.Get(got, conditions.ReadyCondition))
	}

	moved := reg.Push(t, "podinfo", "6.5.0")
	srv.CreateRepo(t, "moved", map[string]string{"deploy/app.yaml": deployment})
	before := head(t, srv, "moved", "main")
	j := newJob(ns, "verified-moved", srv.RepoURL("moved"), setVerified)
	create(t, j)
	got := waitFinished(t, j)
	c := conditions.Get(got, conditions.ReadyCondition)
	if got.Status.Phase != updatev1.UpdateJobFailed || c == nil || c.Reason != updatev1.VerifiedImageMovedReason ||
		!strings.Contains(c.Message, moved) || !strings.Contains(c.Message, verified) {
		t.Fatalf("re-pushed tag: phase %s, Ready %+v; want Failed, VerifiedImageMoved naming both digests", got.Status.Phase, c)
	}
	if got.Status.Attempts > 1 {
		t.Errorf("%d attempts: a moved tag is not retried (the policy makes a new job)", got.Status.Attempts)
	}
	if after := head(t, srv, "moved", "main"); after != before {
		t.Errorf("main moved to %s: the re-pushed tag was written", after)
	}
}

// The job reads a verified tag again with the access its ImageRepository
// gives the scan (pkg/registryaccess): the imagePullSecrets of its
// ServiceAccount, its proxy, and a cloud provider's credentials. The
// cloud case is a protocol test: ECR's token exchange (STS
// AssumeRoleWithWebIdentity, then ECR GetAuthorizationToken, as AWS
// documents them) is the testcloud stand-in, in front of a real registry
// that takes only the password ECR issued.
func TestRunReadsAVerifiedTagAsTheScanReachesIt(t *testing.T) {
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	run := func(t *testing.T, name, image, tag, digest string, mutate func(*imagev1.ImageRepository)) {
		t.Helper()
		repo := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: imagev1.ImageRepositorySpec{Image: image, Interval: metav1.Duration{Duration: time.Hour}}}
		mutate(repo)
		create(t, repo)
		srv.CreateRepo(t, name, map[string]string{"deploy/app.yaml": deployment})
		j := newJob(ns, name, srv.RepoURL(name), func(j *updatev1.UpdateJob) {
			s := &j.Spec.Update.Setters[0]
			s.Name, s.Tag, s.Digest = image, tag, digest
			s.Verified = &updatev1.VerifiedImage{ImageRepository: meta.NamespacedObjectReference{Namespace: ns, Name: name}}
		})
		create(t, j)
		if got := waitFinished(t, j); got.Status.Phase != updatev1.UpdateJobSucceeded {
			t.Fatalf("phase %s, Ready %+v", got.Status.Phase, conditions.Get(got, conditions.ReadyCondition))
		}
	}

	t.Run("ServiceAccount imagePullSecrets", func(t *testing.T) {
		reg := testregistry.New(t, testregistry.Options{Username: "bot", Password: "sa-pass"})
		d := reg.Push(t, "app", "1.0.0")
		auth := base64.StdEncoding.EncodeToString([]byte("bot:sa-pass"))
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pull"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{".dockerconfigjson": []byte(`{"auths":{"` + reg.Host + `":{"auth":"` + auth + `"}}}`)}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "puller"},
				ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}})
		run(t, "via-sa", reg.Repo("app"), "1.0.0", d, func(r *imagev1.ImageRepository) {
			r.Spec.Insecure, r.Spec.ServiceAccountName = true, "puller"
		})
	})

	t.Run("proxy", func(t *testing.T) {
		reg := testregistry.New(t, testregistry.Options{})
		d := reg.Push(t, "app", "1.0.0")
		var proxied atomic.Int64
		// A forward proxy for plain HTTP: requests arrive with absolute URLs.
		proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			proxied.Add(1)
			r.Out.URL = r.In.URL
			r.Out.Host = r.In.URL.Host
		}})
		defer proxy.Close()
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy"},
			Data: map[string][]byte{"address": []byte(proxy.URL)}})
		run(t, "via-proxy", reg.Repo("app"), "1.0.0", d, func(r *imagev1.ImageRepository) {
			r.Spec.Insecure, r.Spec.ProxySecretRef = true, &meta.LocalObjectReference{Name: "proxy"}
		})
		if proxied.Load() == 0 {
			t.Error("no request went through the proxy")
		}
	})

	t.Run("provider aws", func(t *testing.T) {
		cloud := testcloud.New(t)
		cloud.Install(t)
		testcloud.ControllerIRSA(t, "arn:aws:iam::123456789012:role/update-job-controller")
		n := cloud.Calls(testcloud.CallECR) + 1
		reg := testregistry.New(t, testregistry.Options{Username: "AWS", Password: testcloud.ECRPassword(n)})
		d := reg.Push(t, "team/app", "1.0.0")
		cloud.Registry = reg.Host
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cloud-ca"},
			Data: map[string][]byte{"ca.crt": cloud.CAPEM}})
		run(t, "via-ecr", testcloud.ECRRegistry+"/team/app", "1.0.0", d, func(r *imagev1.ImageRepository) {
			r.Spec.Provider = "aws"
			// The stand-in's CA; a real ECR's is in the system's trust.
			r.Spec.CertSecretRef = &meta.LocalObjectReference{Name: "cloud-ca"}
		})
		if cloud.Calls(testcloud.CallECR) < n {
			t.Error("no ECR token was requested")
		}
	})
}

// Jobs of one branch that run as one commit (a runtime group) read their
// verified tags again before it as a job alone does: a tag that moved
// refuses the commit, so no job of the group writes it.
func TestGroupRefusesAVerifiedTagThatMoved(t *testing.T) {
	ctx := context.Background()
	reg, srv, ns, verified := verifiedPodinfo(t)
	const n = 6
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("apps/app-%d/deploy.yaml", i)] = deployment
	}
	srv.CreateRepo(t, "mono", files)
	moved := reg.Push(t, "podinfo", "6.5.0")
	before := head(t, srv, "mono", "main")
	var made []*updatev1.UpdateJob
	for i := range n {
		name := fmt.Sprintf("app-%d", i)
		made = append(made, newJob(ns, name, srv.RepoURL("mono"), func(j *updatev1.UpdateJob) {
			j.Spec.Update.Path = "apps/" + name
			s := &j.Spec.Update.Setters[0]
			s.Name, s.Tag, s.Digest = reg.Repo("podinfo"), "6.5.0", verified
			s.Verified = &updatev1.VerifiedImage{ImageRepository: meta.NamespacedObjectReference{Namespace: ns, Name: "podinfo"}}
		}))
	}
	// Made at once, as an automation's burst makes them, so that they
	// gather into a group (TestJobsOfOneBranchShareACommit).
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, j := range made {
		wg.Go(func() { errs[i] = env.Client.Create(ctx, j) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, j := range made {
		got := waitFinished(t, j)
		c := conditions.Get(got, conditions.ReadyCondition)
		if got.Status.Phase != updatev1.UpdateJobFailed || c == nil || c.Reason != updatev1.VerifiedImageMovedReason ||
			!strings.Contains(c.Message, moved) {
			t.Errorf("%s: phase %s, Ready %+v; want Failed, VerifiedImageMoved naming %s", j.Name, got.Status.Phase, c, moved)
		}
	}
	if after := head(t, srv, "mono", "main"); after != before {
		t.Errorf("main moved to %s: the re-pushed tag was written", after)
	}
}

// verifiedPodinfo is a registry with podinfo:6.5.0 (its digest, verified),
// the namespace's ImageRepository of it, and a git server.
func verifiedPodinfo(t *testing.T) (*testregistry.Registry, *testgit.Server, string, string) {
	reg := testregistry.New(t, testregistry.Options{})
	srv := testgit.New(t, testgit.Options{})
	ns := env.Namespace(t)
	verified := reg.Push(t, "podinfo", "6.5.0")
	create(t, &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "podinfo"},
		Spec: imagev1.ImageRepositorySpec{Image: reg.Repo("podinfo"), Insecure: true, Interval: metav1.Duration{Duration: time.Hour}}})
	return reg, srv, ns, verified
}
