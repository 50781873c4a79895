package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

const waitFor = 20 * time.Second

// readyOrReason waits until obj's Ready condition has the reason (Succeeded
// for ready) for its current generation, and returns the condition.
func waitReason(t testing.TB, obj client.Object, reason string) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	testenv.Eventually(t, waitFor, func() (bool, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		getter := obj.(conditions.Getter)
		cond = conditions.Get(getter, conditions.ReadyCondition)
		return cond != nil && cond.Reason == reason && cond.ObservedGeneration == obj.GetGeneration(), nil
	})
	return cond
}

func create(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func repoFor(ns, name string, reg *testregistry.Registry, path string) *imagev1.ImageRepository {
	return newRepository(ns, name, func(r *imagev1.ImageRepository) {
		r.Spec.Image = reg.Repo(path)
		r.Spec.Insecure = true
		r.Spec.Interval = metav1.Duration{Duration: time.Hour}
	})
}

func policyFor(ns, name, repo string, choice imagev1.ImagePolicyChoice) *imagev1.ImagePolicy {
	return newPolicy(ns, name, func(p *imagev1.ImagePolicy) {
		p.Spec.ImageRepositoryRef.Name = repo
		p.Spec.Policy = choice
	})
}

func semverChoice(r string) imagev1.ImagePolicyChoice {
	return imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: r}}
}

func dockerSecret(ns, name string, reg *testregistry.Registry, user, pass string) *corev1.Secret {
	cfg := fmt.Sprintf(`{"auths":{%q:{"username":%q,"password":%q}}}`, reg.Host, user, pass)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(cfg)},
	}
}

func TestScanAndSelect(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{PageSize: 500})
	var tags []string
	for i := range 1200 {
		tags = append(tags, fmt.Sprintf("1.%d.%d", i/100, i%100))
	}
	tags = append(tags, "2.0.0", "latest", "sha256-abc.sig", "main-0ab12-1700000100", "main-ffe00-1700000200")
	reg.PushTags(t, "team/app", tags)
	ns := namespace(t)

	repo := repoFor(ns, "app", reg, "team/app")
	create(t, repo)
	cond := waitReason(t, repo, conditions.SucceededReason)
	if cond.Message != "successful scan: found 1204 tags" {
		t.Errorf("message %q", cond.Message)
	}
	st := repo.Status
	if st.CanonicalImageName != reg.Repo("team/app") || st.LastScanResult.TagCount != 1204 ||
		!strings.HasPrefix(st.LastScanResult.Revision, "sha256:") || st.ObservedGeneration != repo.Generation {
		t.Errorf("status %+v", st)
	}
	if want := []string{"main-ffe00-1700000200", "main-0ab12-1700000100", "latest", "2.0.0", "1.9.99"}; !slices.Equal(st.LastScanResult.LatestTags[:5], want) {
		t.Errorf("latestTags %v", st.LastScanResult.LatestTags)
	}
	if !slices.Equal(st.ObservedExclusionList, []string{`^.*\.sig$`}) {
		t.Errorf("observedExclusionList %v", st.ObservedExclusionList)
	}

	cases := []struct {
		name   string
		choice imagev1.ImagePolicyChoice
		filter *imagev1.TagFilter
		want   string
	}{
		{"semver", semverChoice("1.x"), nil, "1.11.99"},
		{"alphabetical", imagev1.ImagePolicyChoice{Alphabetical: &imagev1.AlphabeticalPolicy{Order: "desc"}}, nil, "1.0.0"},
		{"numerical-extract", imagev1.ImagePolicyChoice{Numerical: &imagev1.NumericalPolicy{Order: "asc"}},
			&imagev1.TagFilter{Pattern: `^main-[a-f0-9]+-(?P<ts>\d+)$`, Extract: "$ts"}, "main-ffe00-1700000200"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := policyFor(ns, c.name, "app", c.choice)
			p.Spec.FilterTags = c.filter
			create(t, p)
			cond := waitReason(t, p, conditions.SucceededReason)
			if p.Status.LatestRef == nil || p.Status.LatestRef.Tag != c.want || p.Status.LatestRef.Name != repo.Spec.Image {
				t.Errorf("latestRef %+v (%s)", p.Status.LatestRef, cond.Message)
			}
		})
	}

	// Nothing matches: the message counts what was dropped.
	none := policyFor(ns, "none", "app", semverChoice(">=9.0.0"))
	create(t, none)
	if c := waitReason(t, none, imagev1.NoMatchingTagReason); !strings.Contains(c.Message, "1204 tags considered") {
		t.Errorf("no-match message %q", c.Message)
	}
	bad := policyFor(ns, "bad", "app", semverChoice(">=1 <<2"))
	create(t, bad)
	waitReason(t, bad, imagev1.InvalidPolicyReason)
	if !conditions.IsTrue(bad, conditions.StalledCondition) {
		t.Error("an invalid range is not Stalled")
	}

	// A new tag moves the policy after the next scan; the previous image
	// is kept and an event is recorded.
	sem := policyFor(ns, "follow", "app", semverChoice("2.x"))
	create(t, sem)
	waitReason(t, sem, conditions.SucceededReason)
	if sem.Status.LatestRefTime == nil {
		t.Fatal("latestRefTime not set with the first latestRef")
	}
	firstTime := sem.Status.LatestRefTime.Time
	reg.PushTags(t, "team/app", []string{"2.1.0"})
	requestReconcile(t, repo, "rescan-1")
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(sem), sem)
		return sem.Status.LatestRef != nil && sem.Status.LatestRef.Tag == "2.1.0", err
	})
	if sem.Status.ObservedPreviousRef == nil || sem.Status.ObservedPreviousRef.Tag != "2.0.0" {
		t.Errorf("observedPreviousRef %+v", sem.Status.ObservedPreviousRef)
	}
	// The automation controller times policy changes to pushes from here.
	if sem.Status.LatestRefTime == nil || !sem.Status.LatestRefTime.After(firstTime) {
		t.Errorf("latestRefTime %v did not move past %v when latestRef changed", sem.Status.LatestRefTime, firstTime)
	}
}

func requestReconcile(t testing.TB, obj client.Object, token string) {
	t.Helper()
	patch := client.RawPatch("application/merge-patch+json",
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, token)))
	if err := env.Client.Patch(context.Background(), obj, patch); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidImage(t *testing.T) {
	ns := namespace(t)
	for i, img := range []string{"ghcr.io/org/app:1.0", "ghcr.io/org/app@sha256:" + strings.Repeat("a", 64), "ftp://ghcr.io/org/app"} {
		r := newRepository(ns, fmt.Sprintf("bad-%d", i), func(r *imagev1.ImageRepository) { r.Spec.Image = img })
		create(t, r)
		waitReason(t, r, imagev1.ImageURLInvalidReason)
		if !conditions.IsTrue(r, conditions.StalledCondition) {
			t.Errorf("%s: not Stalled", img)
		}
	}
}

func TestAuthFailureAndRecovery(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Username: "bot", Password: "right-pass"})
	reg.PushTags(t, "private/app", []string{"1.0.0"})
	ns := namespace(t)
	secret := dockerSecret(ns, "creds", reg, "bot", "wrong-pass")
	repo := repoFor(ns, "private", reg, "private/app")
	repo.Spec.SecretRef = &meta.LocalObjectReference{Name: "creds"}
	create(t, secret, repo)

	cond := waitReason(t, repo, conditions.AuthenticationFailedReason)
	if !strings.Contains(cond.Message, "UNAUTHORIZED") || strings.Contains(cond.Message, "wrong-pass") {
		t.Errorf("message %q: want the registry's answer, never the secret", cond.Message)
	}
	var evs corev1.EventList
	_ = env.Client.List(context.Background(), &evs, client.InNamespace(ns))
	for _, e := range evs.Items {
		if strings.Contains(e.Message, "wrong-pass") {
			t.Errorf("event leaks the secret: %q", e.Message)
		}
	}

	secret.Data = dockerSecret(ns, "creds", reg, "bot", "right-pass").Data
	if err := env.Client.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	requestReconcile(t, repo, "fixed")
	waitReason(t, repo, conditions.SucceededReason)
}

func TestTLSWithCertSecret(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{ClientCerts: true})
	reg.PushTags(t, "app", []string{"1.0.0", "1.1.0"})
	ns := namespace(t)
	certs := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "certs", Namespace: ns},
		Data:       map[string][]byte{"ca.crt": reg.CAPEM, "tls.crt": reg.ClientCertPEM, "tls.key": reg.ClientKeyPEM},
	}
	repo := repoFor(ns, "tls", reg, "app")
	repo.Spec.Insecure = false
	repo.Spec.CertSecretRef = &meta.LocalObjectReference{Name: "certs"}
	untrusted := repoFor(ns, "untrusted", reg, "app")
	untrusted.Spec.Insecure = false
	create(t, certs, repo, untrusted)
	if c := waitReason(t, repo, conditions.SucceededReason); c.Message != "successful scan: found 2 tags" {
		t.Errorf("message %q", c.Message)
	}
	waitReason(t, untrusted, imagev1.ScanFailedReason)
}

func TestThrottlingAndServerErrors(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0"})
	ns := namespace(t)

	reg.Fail(2, http.StatusTooManyRequests, "1")
	repo := repoFor(ns, "throttled", reg, "app")
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)

	reg.Fail(2, http.StatusInternalServerError, "")
	requestReconcile(t, repo, "500")
	waitReason(t, repo, imagev1.ScanFailedReason)
	// The failure is retried on its own (5s later) and recovers.
	waitReason(t, repo, conditions.SucceededReason)
}

func TestDigestReflection(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	want := reg.Push(t, "app", "1.0.0")
	ns := namespace(t)
	repo := repoFor(ns, "app", reg, "app")
	p := policyFor(ns, "digest", "app", semverChoice("*"))
	p.Spec.DigestReflectionPolicy = imagev1.ReflectIfNotPresent
	create(t, repo, p)
	waitReason(t, p, conditions.SucceededReason)
	if p.Status.LatestRef.Digest != want {
		t.Errorf("digest %q, want %q", p.Status.LatestRef.Digest, want)
	}
}

func TestCrossNamespaceAccess(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0"})
	owner := namespace(t)
	repo := repoFor(owner, "shared", reg, "app")
	repo.Spec.AccessFrom = &meta.AccessFrom{NamespaceSelectors: []meta.NamespaceSelector{{MatchLabels: map[string]string{"team": "a"}}}}
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)

	for _, tc := range []struct {
		labels map[string]string
		reason string
	}{
		{map[string]string{"team": "a"}, conditions.SucceededReason},
		{map[string]string{"team": "b"}, conditions.AccessDeniedReason},
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "consumer-", Labels: tc.labels}}
		create(t, ns)
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
		p := policyFor(ns.Name, "p", "shared", semverChoice("*"))
		p.Spec.ImageRepositoryRef.Namespace = owner
		create(t, p)
		waitReason(t, p, tc.reason)
	}
}

func TestDedupeSuspendAndRequests(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0"})
	ns := namespace(t)

	before := reg.TagListRequests()
	a, b := repoFor(ns, "a", reg, "app"), repoFor(ns, "b", reg, "app")
	create(t, a, b)
	waitReason(t, a, conditions.SucceededReason)
	waitReason(t, b, conditions.SucceededReason)
	if n := reg.TagListRequests() - before; n != 1 {
		t.Errorf("two repositories of one image made %d scans, want 1", n)
	}

	// A reconcile request scans again, and records the request.
	before = reg.TagListRequests()
	requestReconcile(t, a, "again")
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(a), a)
		return a.Status.LastHandledReconcileAt == "again", err
	})
	waitReason(t, a, conditions.SucceededReason)
	if n := reg.TagListRequests() - before; n != 1 {
		t.Errorf("a reconcile request made %d scans, want 1", n)
	}

	// Suspended: no scan, even when asked.
	s := repoFor(ns, "suspended", reg, "other")
	s.Spec.Suspend = true
	before = reg.TagListRequests()
	create(t, s)
	requestReconcile(t, s, "ignored")
	time.Sleep(2 * time.Second)
	if n := reg.TagListRequests() - before; n != 0 {
		t.Errorf("a suspended repository was scanned %d times", n)
	}
}

// A restarted controller serves policies from its store: the registry is
// gone, and the second manager neither scans nor fails.
func TestRestartServesFromStore(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0", "1.1.0"})
	ns := namespace(t)
	dir := t.TempDir()
	second, _ := labels.Parse("shard=second")
	start := func() func() {
		stop, err := env.StartManagerWith(func(o *ctrl.Options) { o.Cache.DefaultLabelSelector = second },
			func(mgr ctrl.Manager) error { return setupReconcilers(mgr, dir) })
		if err != nil {
			t.Fatal(err)
		}
		return stop
	}
	stop := start()
	repo := repoFor(ns, "app", reg, "app")
	p := policyFor(ns, "p", "app", semverChoice("*"))
	for _, o := range []client.Object{repo, p} {
		o.SetLabels(map[string]string{"shard": "second"})
	}
	create(t, repo, p)
	waitReason(t, p, conditions.SucceededReason)
	stop()

	reg.Close()
	stop = start()
	defer stop()
	// A new policy is answered from the store.
	p2 := policyFor(ns, "p2", "app", semverChoice("1.0.x"))
	p2.SetLabels(map[string]string{"shard": "second"})
	create(t, p2)
	waitReason(t, p2, conditions.SucceededReason)
	if p2.Status.LatestRef.Tag != "1.0.0" {
		t.Errorf("latestRef %+v", p2.Status.LatestRef)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(repo), repo); err != nil {
		t.Fatal(err)
	}
	if !conditions.IsReady(repo) {
		t.Errorf("the restarted controller rescanned: %+v", conditions.Get(repo, conditions.ReadyCondition))
	}
}

// Deleting an ImageRepository removes its stored tags, without a
// finalizer: the object goes at once, and its reconcile finds it gone.
func TestDeletionRemovesStoredTags(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0"})
	ns := namespace(t)
	repo := repoFor(ns, "gone", reg, "app")
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)
	if len(repo.Finalizers) != 0 {
		t.Errorf("finalizers %v, want none", repo.Finalizers)
	}
	st, err := store.Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	object := ns + "/gone"
	if _, err := st.Get(object); err != nil {
		t.Fatalf("no stored tags after the scan: %v", err)
	}
	if err := env.Client.Delete(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, func() (bool, error) {
		_, err := st.Get(object)
		return errors.Is(err, store.ErrNotFound), nil
	})
}

// A repository that an earlier version finalized is released when
// deleted, and its tags removed.
func TestEarlierFinalizerIsReleased(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0"})
	ns := namespace(t)
	repo := repoFor(ns, "old", reg, "app")
	repo.Finalizers = []string{Finalizer}
	create(t, repo)
	waitReason(t, repo, conditions.SucceededReason)
	if err := env.Client.Delete(context.Background(), repo); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitFor, func() (bool, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(repo), repo)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	st, err := store.Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ns + "/old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("stored tags survive the deletion: %v", err)
	}
}

// The stored tags of a repository deleted while no controller ran go at
// start-up; those of repositories that exist stay.
func TestStartSweepsDeletedRepositories(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0"})
	ns := namespace(t)
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	repo := repoFor(ns, "kept", reg, "app")
	repo.SetLabels(map[string]string{"shard": "second"})
	create(t, repo)
	for _, object := range []string{ns + "/kept", ns + "/deleted-meanwhile"} {
		if _, err := st.Put(store.Entry{Object: object, Key: "k", ScanTime: time.Now(), Tags: []string{"1.0.0"}}); err != nil {
			t.Fatal(err)
		}
	}
	second, _ := labels.Parse("shard=second")
	stop, err := env.StartManagerWith(func(o *ctrl.Options) { o.Cache.DefaultLabelSelector = second },
		func(mgr ctrl.Manager) error { return setupReconcilers(mgr, dir) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	testenv.Eventually(t, waitFor, func() (bool, error) {
		_, err := st.Get(ns + "/deleted-meanwhile")
		return errors.Is(err, store.ErrNotFound), nil
	})
	if _, err := st.Get(ns + "/kept"); err != nil {
		t.Errorf("the stored tags of an existing repository went: %v", err)
	}
}
