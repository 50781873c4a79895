package gitsource

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

const (
	ns    = "apps"
	other = "elsewhere"
	url   = "https://git.example.com/fleet.git"
)

// gitRepository is a Flux GitRepository as the API server returns it.
func gitRepository(namespace, name, version string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(GitRepositoryGVK.GroupVersion().WithKind(GitRepositoryGVK.Kind))
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

// reader holds the objects the tests read: GitRepositories in both
// namespaces, with and without a ref, and Secrets.
func reader(t *testing.T, get func(client.WithWatch, client.ObjectKey, client.Object) error) client.Reader {
	t.Helper()
	b := fake.NewClientBuilder().WithObjects(
		gitRepository(ns, "fleet", "", map[string]any{
			"url": url, "secretRef": map[string]any{"name": "auth"}, "proxySecretRef": map[string]any{"name": "proxy"},
			"timeout": "20s", "ref": map[string]any{"branch": "main"},
		}),
		gitRepository(ns, "noref", "", map[string]any{"url": url}),
		gitRepository(ns, "beta", "v1beta2", map[string]any{"url": url, "ref": map[string]any{"tag": "v1"}}),
		gitRepository(ns, "nourl", "", map[string]any{"ref": map[string]any{"branch": "main"}}),
		gitRepository(ns, "badurl", "", map[string]any{"url": "ftp://git.example.com/x"}),
		gitRepository(ns, "azure", "", map[string]any{"url": url, "provider": "azure"}),
		gitRepository(ns, "generic", "", map[string]any{"url": url, "provider": "generic"}),
		gitRepository(ns, "badtimeout", "", map[string]any{"url": url, "timeout": "soon"}),
		gitRepository(other, "fleet", "", map[string]any{"url": url, "secretRef": map[string]any{"name": "auth"}, "ref": map[string]any{"tag": "v1"}}),
		secret(ns, "auth", map[string]string{"username": "bot", "password": "ours"}),
		secret(ns, "proxy", map[string]string{"address": "http://proxy.example.com:3128"}),
		secret(ns, "token-and-user", map[string]string{"username": "bot", "bearerToken": "t0ken"}),
		secret(other, "auth", map[string]string{"username": "bot", "password": "theirs"}),
	)
	if get != nil {
		b = b.WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				return get(c, key, obj)
			},
		})
	}
	return b.Build()
}

// automation is an automation of ns with what set sets.
func automation(set func(a *imagev1.ImageUpdateAutomation)) *imagev1.ImageUpdateAutomation {
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

// failure describes an expected *conditions.Failure; the zero value is no
// error at all.
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
	var f *conditions.Failure
	if !errors.As(err, &f) {
		t.Fatalf("%v (%T) is not a *conditions.Failure, want %+v", err, err, want)
	}
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
	minute := &metav1.Duration{Duration: DefaultTimeout}
	repoSpec := &updatev1.GitRepositorySpec{URL: url, SecretRef: &meta.LocalObjectReference{Name: "auth"}}
	tests := []struct {
		name string
		set  func(*imagev1.ImageUpdateAutomation)
		opts Options
		// get, when set, answers the reader's Get instead.
		get  func(client.WithWatch, client.ObjectKey, client.Object) error
		want *Source
		fail failure
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
				Ref: updatev1.GitRepositoryRef{Branch: "main"}, Describe: "GitRepository apps/fleet"},
		},
		{
			name: "spec.git.checkout wins over the GitRepository's ref",
			set: func(a *imagev1.ImageUpdateAutomation) {
				sourceRef(ns, "fleet")(a)
				a.Spec.GitSpec.Checkout = checkout(updatev1.GitRepositoryRef{Branch: "release"})
			},
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, SecretRef: &meta.LocalObjectReference{Name: "auth"},
				ProxySecretRef: &meta.LocalObjectReference{Name: "proxy"}, Timeout: &metav1.Duration{Duration: 20 * time.Second}},
				Ref: updatev1.GitRepositoryRef{Branch: "release"}, Describe: "GitRepository apps/fleet"},
		},
		{
			name: "a GitRepository without a ref checks out master, as in Flux",
			set:  sourceRef("", "noref"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: minute},
				Ref: updatev1.GitRepositoryRef{Branch: "master"}, Describe: "GitRepository apps/noref"},
		},
		{
			name: "the generic provider is plain Secrets",
			set:  sourceRef("", "generic"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url, Timeout: minute},
				Ref: updatev1.GitRepositoryRef{Branch: "master"}, Describe: "GitRepository apps/generic"},
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
				Ref: updatev1.GitRepositoryRef{Tag: "v1"}, Describe: "GitRepository apps/beta"},
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
				Ref: updatev1.GitRepositoryRef{Tag: "v1"}, Describe: "GitRepository elsewhere/fleet"},
		},
		{
			name: "another namespace, refused by --no-cross-namespace-refs",
			set:  sourceRef(other, "fleet"),
			opts: Options{NoCrossNamespaceRefs: true},
			want: &Source{Describe: "GitRepository elsewhere/fleet"},
			fail: failure{conditions.AccessDeniedReason, true, "cross-namespace references are disabled"},
		},
		{
			name: "a GitRepository not there (yet) is retried",
			set:  sourceRef("", "missing"),
			want: &Source{Describe: "GitRepository apps/missing"},
			fail: failure{imagev1.SourceNotFoundReason, false, "GitRepository apps/missing not found"},
		},
		{
			name: "Flux's kind not installed",
			set:  sourceRef("", "fleet"),
			get: func(client.WithWatch, client.ObjectKey, client.Object) error {
				return &apimeta.NoKindMatchError{GroupKind: GitRepositoryGVK.GroupKind(), SearchedVersions: []string{"v1"}}
			},
			want: &Source{Describe: "GitRepository apps/fleet"},
			fail: failure{imagev1.SourceNotFoundReason, true, "the GitRepository kind (source.toolkit.fluxcd.io/v1) is not installed"},
		},
		{
			name: "a GitRepository without a URL",
			set:  sourceRef("", "nourl"),
			want: &Source{Describe: "GitRepository apps/nourl"},
			fail: failure{imagev1.InvalidSourceReason, true, "GitRepository apps/nourl has no URL"},
		},
		{
			name: "a GitRepository with a URL a job refuses",
			set:  sourceRef("", "badurl"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: "ftp://git.example.com/x"}, Describe: "GitRepository apps/badurl"},
			fail: failure{imagev1.InvalidSourceReason, true, "GitRepository apps/badurl: "},
		},
		{
			name: "a cloud provider's credentials",
			set:  sourceRef("", "azure"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url}, Describe: "GitRepository apps/azure"},
			fail: failure{imagev1.InvalidSourceReason, true, `uses provider "azure"`},
		},
		{
			name: "a timeout that is no duration",
			set:  sourceRef("", "badtimeout"),
			want: &Source{Repository: updatev1.GitRepositorySpec{URL: url}, Describe: "GitRepository apps/badtimeout"},
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
			a := automation(tt.set)
			before := a.DeepCopy()
			src, err := Resolve(context.Background(), reader(t, tt.get), a, tt.opts)
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
	boom := errors.New("connection refused")
	r := reader(t, func(client.WithWatch, client.ObjectKey, client.Object) error { return boom })
	_, err := Resolve(context.Background(), r, automation(sourceRef("", "fleet")), Options{})
	var f *conditions.Failure
	if !errors.Is(err, boom) || errors.As(err, &f) || !strings.Contains(err.Error(), "reading GitRepository apps/fleet") {
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
	boom := errors.New("connection refused")
	tests := []struct {
		name string
		// secret and proxy are the Secrets the repository names.
		secret, proxy string
		get           func(client.WithWatch, client.ObjectKey, client.Object) error
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
			fail:   failure{conditions.SecretNotFoundReason, false, "Secret apps/only-elsewhere (the secretRef) not found, for GitRepository elsewhere/fleet; the UpdateJobs run in namespace apps and read it there"},
			gitErr: git.ErrSecretNotFound},
		{name: "a proxy Secret missing", secret: "auth", proxy: "no-proxy",
			fail:   failure{conditions.SecretNotFoundReason, false, "(the proxySecretRef) not found"},
			gitErr: git.ErrSecretNotFound},
		{name: "credentials that cannot work", secret: "token-and-user",
			fail:   failure{imagev1.InvalidSecretReason, true, "credentials of GitRepository elsewhere/fleet: invalid credentials: "},
			gitErr: git.ErrInvalidCredentials},
		{name: "a failed read", secret: "auth",
			get:    func(client.WithWatch, client.ObjectKey, client.Object) error { return boom },
			gitErr: boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &Source{Repository: updatev1.GitRepositorySpec{URL: url}, Describe: "GitRepository elsewhere/fleet"}
			if tt.secret != "" {
				src.Repository.SecretRef = &meta.LocalObjectReference{Name: tt.secret}
			}
			if tt.proxy != "" {
				src.Repository.ProxySecretRef = &meta.LocalObjectReference{Name: tt.proxy}
			}
			a := automation(sourceRef(other, "fleet"))
			auth, err := Credentials(context.Background(), reader(t, tt.get), a, src)
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
			} else if f := (*conditions.Failure)(nil); errors.As(err, &f) || err.Error() != ce.Err.Error() {
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
