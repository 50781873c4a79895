package gitsource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/git/gitsecret"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

const url = "https://git.example.com/fleet.git"

// env is the control plane the tests read from: a real kube-apiserver and
// etcd with the image-toolkit CRDs and Flux's GitRepository CRD
// (testdata/crds).
var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	e, err := testenv.Start(testenv.AllCharts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{
		Paths: []string{"testdata/crds"}, ErrorIfPathMissing: true,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "installing Flux's GitRepository CRD:", err)
	} else {
		env = e
		code = m.Run()
	}
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
	}
	os.Exit(code)
}

// gitRepository is a Flux GitRepository as it is sent to the API server,
// at v1 unless version names another.
func gitRepository(namespace, name, version string, spec map[string]any) *unstructured.Unstructured {
	spec["interval"] = "1m" // required by the CRD; not read
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(GitRepositoryGVK)
	if version != "" {
		u.SetAPIVersion(GitRepositoryGVK.Group + "/" + version)
	}
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

func secret(namespace, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// fixtures creates, through the real client, the objects the tests read in
// two fresh namespaces, and returns them: ns, the automation's, and other.
// Both hold GitRepositories (with and without a ref) and Secrets.
func fixtures(t *testing.T) (ns, other string) {
	t.Helper()
	ns, other = env.Namespace(t), env.Namespace(t)
	for _, obj := range []client.Object{
		gitRepository(ns, "fleet", "", map[string]any{
			"url": url, "secretRef": map[string]any{"name": "auth"}, "proxySecretRef": map[string]any{"name": "proxy"},
			"timeout": "20s", "ref": map[string]any{"branch": "main"},
		}),
		gitRepository(ns, "noref", "", map[string]any{"url": url}),
		gitRepository(ns, "beta", "v1beta2", map[string]any{"url": url, "ref": map[string]any{"tag": "v1"}}),
		gitRepository(ns, "azure", "", map[string]any{"url": url, "provider": "azure", "serviceAccountName": "team"}),
		gitRepository(ns, "generic", "", map[string]any{"url": url, "provider": "generic"}),
		// The CRD here does not check the timeout's form, so the server
		// stores it as written.
		gitRepository(ns, "badtimeout", "", map[string]any{"url": url, "timeout": "soon"}),
		gitRepository(other, "fleet", "", map[string]any{"url": url, "secretRef": map[string]any{"name": "auth"}, "ref": map[string]any{"tag": "v1"}}),
		secret(ns, "auth", map[string]string{"username": "bot", "password": "ours"}),
		secret(ns, "proxy", map[string]string{"address": "http://proxy.example.com:3128"}),
		secret(ns, "token-and-user", map[string]string{"username": "bot", "bearerToken": "t0ken"}),
		secret(other, "auth", map[string]string{"username": "bot", "password": "theirs"}),
		secret(other, "only-elsewhere", map[string]string{"username": "bot", "password": "theirs"}),
	} {
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
	return ns, other
}

// unreachable is a client of an API server that refuses connections: a
// closed port on this host, with the real server's mappings so that the
// read itself is attempted.
func unreachable(t *testing.T) client.Reader {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + addr
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme, Mapper: env.Client.RESTMapper()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// storedAs reads through the real client and then applies edit to each
// GitRepository it returns: a GitRepository as a looser CRD than Flux's
// (or an older one) would have stored it, which this API server refuses.
type storedAs struct {
	client.Reader
	edit func(*unstructured.Unstructured)
}

func (r storedAs) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind().GroupKind() == GitRepositoryGVK.GroupKind() {
		r.edit(u)
	}
	return nil
}

// automation is an automation of namespace ns with what set sets. It is
// Resolve's and Credentials' argument, never read from the server, so it
// is not created: some cases are automations the CRD refuses.
func automation(ns string, set func(a *imagev1.ImageUpdateAutomation)) *imagev1.ImageUpdateAutomation {
	a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}
	set(a)
	return a
}

func sourceRef(namespace, name string) func(*imagev1.ImageUpdateAutomation) {
	return func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.SourceRef = &imagev1.CrossNamespaceSourceReference{Namespace: namespace, Name: name}
	}
}

func checkout(ref updatev1.GitRepositoryRef) *updatev1.GitCheckoutSpec {
	return &updatev1.GitCheckoutSpec{Reference: ref}
}

// failure describes the expected Failure an error means for the
// automation (conditions.Classify); the zero value is no error at all.
type failure struct {
	reason  string
	stalled bool
	// message is a part of the error's message.
	message string
}

func checkFailure(t *testing.T, err error, want failure) {
	t.Helper()
	switch {
	case want == failure{} && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want == failure{}:
		return
	case err == nil:
		t.Fatalf("no error, want %+v", want)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%v (%T) is not a *gitsource.Error, want %+v", err, err, want)
	}
	f, _ := conditions.Classify(err)
	if f.Reason != want.reason || f.Stalled != want.stalled || !strings.Contains(err.Error(), want.message) {
		t.Errorf("got reason %s, stalled %v: %v; want %+v", f.Reason, f.Stalled, err, want)
	}
}

// Resolve reads the repository from spec.git.repository or the Flux
// GitRepository spec.sourceRef names (at the version its apiVersion names,
// in the automation's namespace unless it names another), takes
// spec.git.checkout over the GitRepository's ref, defaults the ref to
// master and the timeout to a minute as Flux does, and reports each
// problem as the Failure the automation's condition records, returning
// what it resolved before the problem.
func TestResolve(t *testing.T) {
	ns, other := fixtures(t)
	minute := &metav1.Duration{Duration: DefaultTimeout}
	repoSpec := &updatev1.GitRepositorySpec{URL: url, SecretRef: &meta.LocalObjectReference{Name: "auth"}}
	tests := []struct {
		name string
		set  func(*imagev1.ImageUpdateAutomation)
		opts Options
		// stored, when set, is what a GitRepository this API server
		// refuses would look like: the case reads the real one through
		// storedAs with it, after checking that the server refuses it.
		stored func(*unstructured.Unstructured)
		want   *Source
		fail   failure
	}{
		{
			name: "spec.git.repository with its checkout, the timeout defaulted",
			set: func(a *imagev1.ImageUpdateAutomation) {
				a.Spec.GitSpec.Repository = repoSpec
				a.Spec.GitSpec.Checkout = checkout(updatev1.GitRepositoryRef{Branch: "main"})
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, SecretRef: repoSpec.SecretRef, Timeout: minute},
				Ref: updatev1.GitRepositoryRef{Branch: "main"}, Describe: "spec.git.repository"},
		},
		{
			name: "spec.git.repository's own timeout is kept",
			set: func(a *imagev1.ImageUpdateAutomation) {
				a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: url, Timeout: &metav1.Duration{Duration: time.Second}}
				a.Spec.GitSpec.Checkout = checkout(updatev1.GitRepositoryRef{Branch: "main"})
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: &metav1.Duration{Duration: time.Second}},
				Ref: updatev1.GitRepositoryRef{Branch: "main"}, Describe: "spec.git.repository"},
		},
		{
			name: "spec.git.repository without a checkout",
			set:  func(a *imagev1.ImageUpdateAutomation) { a.Spec.GitSpec.Repository = repoSpec },
			want: &Source{Describe: "spec.git.repository"},
			fail: failure{conditions.InvalidSpecReason, true, "spec.git.checkout is required"},
		},
		{
			name: "no source at all",
			set:  func(*imagev1.ImageUpdateAutomation) {},
			fail: failure{conditions.InvalidSpecReason, true, "set spec.sourceRef or spec.git.repository"},
		},
		{
			name: "spec.git.repository with a URL a job refuses",
			set: func(a *imagev1.ImageUpdateAutomation) {
				a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: "ftp://git.example.com/x"}
				a.Spec.GitSpec.Checkout = checkout(updatev1.GitRepositoryRef{Branch: "main"})
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: "ftp://git.example.com/x"}, Describe: "spec.git.repository"},
			fail: failure{imagev1.InvalidSourceReason, true, "spec.git.repository: "},
		},
		{
			name: "a GitRepository: URL, Secrets, timeout and ref",
			set:  sourceRef("", "fleet"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, SecretRef: &meta.LocalObjectReference{Name: "auth"},
				ProxySecretRef: &meta.LocalObjectReference{Name: "proxy"}, Timeout: &metav1.Duration{Duration: 20 * time.Second}},
				Ref: updatev1.GitRepositoryRef{Branch: "main"}, Describe: "GitRepository " + ns + "/fleet"},
		},
		{
			name: "spec.git.checkout wins over the GitRepository's ref",
			set: func(a *imagev1.ImageUpdateAutomation) {
				sourceRef(ns, "fleet")(a)
				a.Spec.GitSpec.Checkout = checkout(updatev1.GitRepositoryRef{Branch: "release"})
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, SecretRef: &meta.LocalObjectReference{Name: "auth"},
				ProxySecretRef: &meta.LocalObjectReference{Name: "proxy"}, Timeout: &metav1.Duration{Duration: 20 * time.Second}},
				Ref: updatev1.GitRepositoryRef{Branch: "release"}, Describe: "GitRepository " + ns + "/fleet"},
		},
		{
			name: "a GitRepository without a ref checks out master, as in Flux",
			set:  sourceRef("", "noref"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: minute},
				Ref: updatev1.GitRepositoryRef{Branch: "master"}, Describe: "GitRepository " + ns + "/noref"},
		},
		{
			name: "the generic provider is plain Secrets",
			set:  sourceRef("", "generic"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: minute},
				Ref: updatev1.GitRepositoryRef{Branch: "master"}, Describe: "GitRepository " + ns + "/generic"},
		},
		{
			name: "the version spec.sourceRef.apiVersion names is read",
			set: func(a *imagev1.ImageUpdateAutomation) {
				sourceRef("", "beta")(a)
				a.Spec.SourceRef.APIVersion = "source.toolkit.fluxcd.io/v1beta2"
				a.Spec.SourceRef.Kind = "GitRepository"
				a.Spec.GitSpec.Push = &updatev1.PushSpec{Branch: "auto"}
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: minute},
				Ref: updatev1.GitRepositoryRef{Tag: "v1"}, Describe: "GitRepository " + ns + "/beta"},
		},
		{
			name: "another kind of source",
			set: func(a *imagev1.ImageUpdateAutomation) {
				sourceRef("", "fleet")(a)
				a.Spec.SourceRef.Kind = "Bucket"
			},
			want: &Source{Describe: "spec.sourceRef"},
			fail: failure{imagev1.InvalidSourceReason, true, `spec.sourceRef.kind "Bucket" is not supported`},
		},
		{
			name: "an apiVersion of another group",
			set: func(a *imagev1.ImageUpdateAutomation) {
				sourceRef("", "fleet")(a)
				a.Spec.SourceRef.APIVersion = "example.com/v1"
			},
			want: &Source{Describe: "spec.sourceRef"},
			fail: failure{imagev1.InvalidSourceReason, true, `spec.sourceRef.apiVersion "example.com/v1" is not a version of source.toolkit.fluxcd.io`},
		},
		{
			name: "another namespace, allowed",
			set: func(a *imagev1.ImageUpdateAutomation) {
				sourceRef(other, "fleet")(a)
				a.Spec.GitSpec.Push = &updatev1.PushSpec{Branch: "auto"}
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, SecretRef: &meta.LocalObjectReference{Name: "auth"}, Timeout: minute},
				Ref: updatev1.GitRepositoryRef{Tag: "v1"}, Describe: "GitRepository " + other + "/fleet"},
		},
		{
			name: "another namespace, refused by --no-cross-namespace-refs",
			set:  sourceRef(other, "fleet"),
			opts: Options{NoCrossNamespaceRefs: true},
			want: &Source{Describe: "GitRepository " + other + "/fleet"},
			fail: failure{conditions.AccessDeniedReason, true, "cross-namespace references are disabled"},
		},
		{
			name: "a GitRepository not there (yet) is retried",
			set:  sourceRef("", "missing"),
			want: &Source{Describe: "GitRepository " + ns + "/missing"},
			fail: failure{imagev1.SourceNotFoundReason, false, "GitRepository " + ns + "/missing not found"},
		},
		{
			// The server has the CRD, so the kind is asked for at a
			// version it does not serve (testdata/crds serves v1 and
			// v1beta2): the same answer from its discovery as when the
			// CRD is missing.
			name: "Flux's kind not installed",
			set: func(a *imagev1.ImageUpdateAutomation) {
				sourceRef("", "fleet")(a)
				a.Spec.SourceRef.APIVersion = "source.toolkit.fluxcd.io/v1beta1"
				a.Spec.GitSpec.Push = &updatev1.PushSpec{Branch: "auto"}
			},
			want: &Source{Describe: "GitRepository " + ns + "/fleet"},
			fail: failure{imagev1.SourceNotFoundReason, true, "the GitRepository kind (source.toolkit.fluxcd.io/v1beta1) is not installed"},
		},
		{
			// Flux's CRD requires spec.url, so the server refuses this
			// GitRepository; Resolve still checks, for one stored under
			// a looser CRD.
			name:   "a GitRepository without a URL",
			set:    sourceRef("", "noref"),
			stored: func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "url") },
			want:   &Source{Describe: "GitRepository " + ns + "/noref"},
			fail:   failure{imagev1.InvalidSourceReason, true, "GitRepository " + ns + "/noref has no URL"},
		},
		{
			// Flux's CRD allows only http, https and ssh URLs, so the
			// server refuses this GitRepository too.
			name: "a GitRepository with a URL a job refuses",
			set:  sourceRef("", "noref"),
			stored: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "ftp://git.example.com/x", "spec", "url")
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: "ftp://git.example.com/x"}, Describe: "GitRepository " + ns + "/noref"},
			fail: failure{imagev1.InvalidSourceReason, true, "GitRepository " + ns + "/noref: "},
		},
		{
			name: "a cloud provider's credentials and identity are carried to the jobs",
			set:  sourceRef("", "azure"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: minute, Provider: "azure", ServiceAccountName: "team"},
				Ref: updatev1.GitRepositoryRef{Branch: "master"}, Describe: "GitRepository " + ns + "/azure"},
		},
		{
			name: "a timeout that is no duration",
			set:  sourceRef("", "badtimeout"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url}, Describe: "GitRepository " + ns + "/badtimeout"},
			fail: failure{imagev1.InvalidSourceReason, true, `invalid spec.timeout "soon"`},
		},
		{
			name: "a checkout ref that sets nothing",
			set: func(a *imagev1.ImageUpdateAutomation) {
				a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: url}
				a.Spec.GitSpec.Checkout = checkout(updatev1.GitRepositoryRef{})
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: minute}, Describe: "spec.git.repository"},
			fail: failure{conditions.InvalidSpecReason, true, "sets none of branch"},
		},
		{
			name: "a tag checkout with nowhere to push",
			set: func(a *imagev1.ImageUpdateAutomation) {
				a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: url}
				a.Spec.GitSpec.Checkout = checkout(updatev1.GitRepositoryRef{Tag: "v1"})
				a.Spec.GitSpec.Push = &updatev1.PushSpec{Options: map[string]string{"ci.skip": ""}}
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: minute}, Ref: updatev1.GitRepositoryRef{Tag: "v1"}, Describe: "spec.git.repository"},
			fail: failure{conditions.InvalidSpecReason, true, "no branch to push to"},
		},
		{
			name: "a tag checkout pushed by refspec",
			set: func(a *imagev1.ImageUpdateAutomation) {
				a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: url}
				a.Spec.GitSpec.Checkout = checkout(updatev1.GitRepositoryRef{Tag: "v1"})
				a.Spec.GitSpec.Push = &updatev1.PushSpec{Refspec: "HEAD:refs/heads/auto"}
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: minute}, Ref: updatev1.GitRepositoryRef{Tag: "v1"}, Describe: "spec.git.repository"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := automation(ns, tt.set)
			before := a.DeepCopy()
			var r client.Reader = env.Client
			if tt.stored != nil {
				refused := gitRepository(ns, "refused", "", map[string]any{"url": url})
				tt.stored(refused)
				env.ExpectInvalid(t, refused, "spec.url")
				r = storedAs{Reader: r, edit: tt.stored}
			}
			src, err := Resolve(context.Background(), r, a, tt.opts)
			if !reflect.DeepEqual(a, before) {
				t.Error("the automation was changed")
			}
			checkFailure(t, err, tt.fail)
			switch {
			case tt.want == nil && src != nil:
				t.Errorf("source %+v, want none", src)
			case tt.want != nil && src == nil:
				t.Errorf("no source, want %+v", tt.want)
			case tt.want != nil && !equal(*src, *tt.want):
				t.Errorf("source\n%+v\nwant\n%+v", *src, *tt.want)
			}
		})
	}
}

// A read of the GitRepository failing for another reason is no Failure:
// it is transient and names the GitRepository.
func TestResolveTransient(t *testing.T) {
	ns, _ := fixtures(t)
	_, err := Resolve(context.Background(), unreachable(t), automation(ns, sourceRef("", "fleet")), Options{})
	_, classified := conditions.Classify(err)
	if !errors.Is(err, syscall.ECONNREFUSED) || classified || !strings.Contains(err.Error(), "reading GitRepository "+ns+"/fleet") {
		t.Errorf("got %v", err)
	}
}

func equal(a, b Source) bool {
	return a.Describe == b.Describe && a.Ref == b.Ref && a.Repository.URL == b.Repository.URL &&
		equalPtr(a.Repository.SecretRef, b.Repository.SecretRef) &&
		equalPtr(a.Repository.ProxySecretRef, b.Repository.ProxySecretRef) &&
		equalPtr(a.Repository.Timeout, b.Repository.Timeout)
}

func equalPtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// Credentials reads the Secrets the repository names in the automation's
// namespace, never in the GitRepository's: a Secret only there is missing
// (retried), credentials that cannot work stall, and any other read
// failure is transient; each is a *CredentialsError carrying pkg/git's
// error, worded for the condition.
func TestCredentials(t *testing.T) {
	ns, other := fixtures(t)
	tests := []struct {
		name string
		// secret and proxy are the Secrets the repository names.
		secret, proxy string
		// unreachable reads from a server that refuses connections.
		unreachable bool
		// password and proxyURL are what the Auth holds.
		password, proxyURL string
		fail               failure
		// gitErr is pkg/git's error in the chain.
		gitErr error
	}{
		{name: "no Secrets: anonymous"},
		{name: "the automation's namespace's Secret", secret: "auth", password: "ours"},
		{name: "a proxy Secret", secret: "auth", proxy: "proxy", password: "ours", proxyURL: "http://proxy.example.com:3128"},
		{name: "a Secret missing from the automation's namespace", secret: "only-elsewhere",
			fail:   failure{conditions.SecretNotFoundReason, false, "Secret " + ns + "/only-elsewhere (the secretRef) not found, for GitRepository " + other + "/fleet; the UpdateJobs run in namespace " + ns + " and read it there"},
			gitErr: gitsecret.ErrNotFound},
		{name: "a proxy Secret missing", secret: "auth", proxy: "no-proxy",
			fail:   failure{conditions.SecretNotFoundReason, false, "(the proxySecretRef) not found"},
			gitErr: gitsecret.ErrNotFound},
		{name: "credentials that cannot work", secret: "token-and-user",
			fail:   failure{imagev1.InvalidSecretReason, true, "credentials of GitRepository " + other + "/fleet: invalid credentials: "},
			gitErr: git.ErrInvalidCredentials},
		{name: "a failed read", secret: "auth",
			unreachable: true,
			gitErr:      syscall.ECONNREFUSED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &Source{Repository: updatev1.GitRepositorySpec{URL: url}, Describe: "GitRepository " + other + "/fleet"}
			if tt.secret != "" {
				src.Repository.SecretRef = &meta.LocalObjectReference{Name: tt.secret}
			}
			if tt.proxy != "" {
				src.Repository.ProxySecretRef = &meta.LocalObjectReference{Name: tt.proxy}
			}
			a := automation(ns, sourceRef(other, "fleet"))
			var r client.Reader = env.Client
			if tt.unreachable {
				r = unreachable(t)
			}
			auth, err := Credentials(context.Background(), r, a, src)
			if tt.gitErr == nil {
				checkFailure(t, err, failure{})
				if auth.Password != tt.password || auth.ProxyURL != tt.proxyURL {
					t.Errorf("password %q, proxy %q; want %q, %q", auth.Password, auth.ProxyURL, tt.password, tt.proxyURL)
				}
				return
			}
			if auth != nil {
				t.Errorf("an Auth with an error")
			}
			var ce *CredentialsError
			if !errors.As(err, &ce) || !errors.Is(ce.Err, tt.gitErr) || ce.Namespace != ns || ce.Source != src.Describe {
				t.Fatalf("got %v (%T), want a *CredentialsError with %v", err, err, tt.gitErr)
			}
			if tt.fail != (failure{}) {
				checkFailure(t, err, tt.fail)
			} else if _, classified := conditions.Classify(err); classified || err.Error() != ce.Err.Error() {
				t.Errorf("got %v, want pkg/git's error alone, transient", err)
			}
		})
	}
}

// BranchOnly holds only for a ref that names a branch and nothing else,
// and DescribeRef names every part a ref sets, in the API's order.
func TestRefs(t *testing.T) {
	tests := []struct {
		ref      updatev1.GitRepositoryRef
		branch   bool
		describe string
	}{
		{updatev1.GitRepositoryRef{}, false, ""},
		{updatev1.GitRepositoryRef{Branch: "main"}, true, "branch main"},
		{updatev1.GitRepositoryRef{Tag: "v1"}, false, "tag v1"},
		{updatev1.GitRepositoryRef{Branch: "main", Commit: "abc123"}, false, "branch main, commit abc123"},
		{updatev1.GitRepositoryRef{SemVer: ">=1.0.0", Name: "refs/tags/x"}, false, "semver >=1.0.0, name refs/tags/x"},
	}
	for _, tt := range tests {
		if got := BranchOnly(tt.ref); got != tt.branch {
			t.Errorf("BranchOnly(%+v) = %v", tt.ref, got)
		}
		if got := DescribeRef(tt.ref); got != tt.describe {
			t.Errorf("DescribeRef(%+v) = %q, want %q", tt.ref, got, tt.describe)
		}
	}
}
