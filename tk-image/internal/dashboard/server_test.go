package dashboard

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/update-job-controller/forges"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	forges.Register() // as New does, for the tests that build rows without a Server
	var err error
	if env, err = testenv.Start(testenv.AllCharts...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// serve starts a dashboard as cfg over the test API server.
func serve(t *testing.T, cfg *rest.Config, opts Options) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if opts.Debounce == 0 {
		opts.Debounce = 20 * time.Millisecond
	}
	s, err := New(ctx, cfg, env.Scheme, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t testing.TB, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// automation creates an automation with a Ready condition saying msg.
func automation(t *testing.T, ns, name string, mut func(*imagev1.ImageUpdateAutomation)) *imagev1.ImageUpdateAutomation {
	t.Helper()
	ctx := context.Background()
	a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	a.Spec.Interval = metav1.Duration{Duration: time.Hour}
	a.Spec.GitSpec.Repository = &updatev1.GitRepositorySpec{URL: "https://github.com/org/fleet.git"}
	a.Spec.GitSpec.Checkout = &updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}}
	a.Spec.GitSpec.Commit.Author.Email = "bot@example.com"
	if mut != nil {
		mut(a)
	}
	status := a.Status
	if err := env.Client.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	a.Status = status
	if err := env.Client.Status().Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	return a
}

const hostile = `<script>alert("x")</script>`

// Names, messages and labels with markup in them are text on every page:
// an event message, a Ready message and a label of the policy selector
// carry a script, and no page lets it through.
func TestPagesEscapeHostileData(t *testing.T) {
	ns := env.Namespace(t)
	a := automation(t, ns, "hostile", func(a *imagev1.ImageUpdateAutomation) {
		a.Spec.PolicySelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": hostile}}
		a.Status.Conditions = []metav1.Condition{{Type: conditions.ReadyCondition, Status: metav1.ConditionFalse,
			Reason: "GitOperationFailed", Message: "push refused: " + hostile, LastTransitionTime: metav1.Now()}}
	})
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hostile.1"},
		InvolvedObject: corev1.ObjectReference{Kind: "ImageUpdateAutomation", Namespace: ns, Name: a.Name, UID: a.UID},
		Reason:         "Failed", Message: "event says " + hostile, Type: corev1.EventTypeWarning, Count: 1,
		LastTimestamp: metav1.Now(), Source: corev1.EventSource{Component: "test"}}
	if err := env.Client.Create(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	base := serve(t, env.Config, Options{})
	escaped := `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`
	for _, page := range []string{"/", "/?q=" + url.QueryEscape(hostile), "/automations/" + ns + "/hostile"} {
		code, body := get(t, base+page)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", page, code, body)
		}
		if strings.Contains(body, "<script>alert") {
			t.Errorf("%s lets a script through:\n%s", page, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(") {
			t.Errorf("%s does not show the hostile text escaped", page)
		}
	}
	_, body := get(t, base+"/automations/"+ns+"/hostile")
	for _, want := range []string{"event says " + escaped, "push refused: " + escaped} {
		if !strings.Contains(body, want) {
			t.Errorf("automation page lacks %q", want)
		}
	}
}

var tokenRE = regexp.MustCompile(`name="token" value="([0-9a-f]+)"`)

// token reads the action token from a page.
func token(t *testing.T, base string) string {
	t.Helper()
	_, body := get(t, base+"/")
	m := tokenRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no action token on the Fleet page:\n%s", body)
	}
	return m[1]
}

func post(t *testing.T, base, path string, form url.Values) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Suspend and resume patch the object as the user; a post without the
// page's token is refused before it reaches the API server.
func TestActionsPatchAsTheUser(t *testing.T) {
	ns := env.Namespace(t)
	automation(t, ns, "apps", nil)
	base := serve(t, env.Config, Options{})
	path := "/actions/suspend/imageupdateautomations/" + ns + "/apps"
	if code, body := post(t, base, path, url.Values{"token": {"forged"}}); code != http.StatusForbidden || !strings.Contains(body, "did not come from a dashboard page") {
		t.Fatalf("forged post: %d %s", code, body)
	}
	code, body := post(t, base, path, url.Values{"token": {token(t, base)}, "back": {"/?namespace=" + ns}})
	if code != http.StatusOK || !strings.Contains(body, "suspended") {
		t.Fatalf("suspend: %d %s", code, body)
	}
	got := &imagev1.ImageUpdateAutomation{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "apps"}, got); err != nil || !got.Spec.Suspend {
		t.Fatalf("not suspended: %v", err)
	}
	// A suspended automation takes no request: Run now says so, and
	// writes nothing.
	code, body = post(t, base, "/actions/run/imageupdateautomations/"+ns+"/apps", url.Values{"token": {token(t, base)}})
	if code != http.StatusConflict || !strings.Contains(body, "is suspended: resume first") {
		t.Fatalf("run while suspended: %d %s", code, body)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "apps"}, got); err != nil || got.Annotations[meta.ReconcileRequestAnnotation] != "" {
		t.Fatalf("a run was requested of a suspended automation: %v %v", got.Annotations, err)
	}
	code, body = post(t, base, "/actions/resume/imageupdateautomations/"+ns+"/apps", url.Values{"token": {token(t, base)}})
	if code != http.StatusOK || !strings.Contains(body, "resumed") {
		t.Fatalf("resume: %d %s", code, body)
	}
	code, body = post(t, base, "/actions/run/imageupdateautomations/"+ns+"/apps", url.Values{"token": {token(t, base)}})
	if code != http.StatusOK || !strings.Contains(body, "run requested") {
		t.Fatalf("run: %d %s", code, body)
	}
	code, body = post(t, base, "/actions/release/imageupdateautomations/"+ns+"/apps", url.Values{"token": {token(t, base)}})
	if code != http.StatusOK || !strings.Contains(body, "holds released") {
		t.Fatalf("release: %d %s", code, body)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "apps"}, got); err != nil {
		t.Fatal(err)
	}
	if a := got.Annotations; a[imagev1.ReleaseHoldsAnnotation] == "" || a[imagev1.ReleaseHoldsAnnotation] != a[meta.ReconcileRequestAnnotation] {
		t.Errorf("release annotations %v, want the release token as a reconcile request too", a)
	}
	if code, _ := post(t, base, "/actions/release/imagepolicies/"+ns+"/apps", url.Values{"token": {token(t, base)}}); code != http.StatusBadRequest {
		t.Errorf("release of a policy: %d, want 400", code)
	}
}

// A user who may read but not patch sees the API server's refusal, named
// as such; the dashboard grants nothing RBAC does not.
func TestForbiddenActionShowsTheRefusal(t *testing.T) {
	ns := env.Namespace(t)
	automation(t, ns, "apps", nil)
	base := serve(t, viewer(t, ns).Config(), Options{User: "viewer-" + ns})
	code, body := post(t, base, "/actions/suspend/imageupdateautomations/"+ns+"/apps", url.Values{"token": {token(t, base)}})
	if code != http.StatusForbidden || !strings.Contains(body, "Forbidden: your credentials may not suspend") || !strings.Contains(body, "cannot patch") {
		t.Fatalf("want the API server's refusal, got %d:\n%s", code, body)
	}
}

// viewer is a user of the test API server who may read the image-toolkit
// kinds and events, and change nothing.
func viewer(t *testing.T, ns string) *envtest.AuthenticatedUser {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "dashboard-viewer-" + ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{imagev1.GroupVersion.Group, updatev1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "viewer-" + ns}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	user, err := env.AddUser(envtest.User{Name: "viewer-" + ns}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return user
}

// Read-only renders no action and refuses a post even with the token.
func TestReadOnlyHasNoActions(t *testing.T) {
	ns := env.Namespace(t)
	automation(t, ns, "apps", nil)
	base := serve(t, env.Config, Options{ReadOnly: true})
	for _, page := range []string{"/?namespace=" + ns, "/automations/" + ns + "/apps"} {
		_, body := get(t, base+page)
		if strings.Contains(body, `method="post"`) || strings.Contains(body, "<button type=\"submit\">Run now") {
			t.Errorf("%s has actions in read-only mode", page)
		}
		if !strings.Contains(body, "read-only") {
			t.Errorf("%s does not say it is read-only", page)
		}
	}
	code, _ := post(t, base, "/actions/suspend/imageupdateautomations/"+ns+"/apps", url.Values{})
	if code != http.StatusForbidden {
		t.Errorf("post in read-only mode: %d", code)
	}
}

// The event stream names a status change, in the namespace asked for, as
// the informer sees it.
func TestEventStreamNamesChanges(t *testing.T) {
	ns := env.Namespace(t)
	a := automation(t, ns, "apps", nil)
	base := serve(t, env.Config, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events?namespace="+ns, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Scan() // retry:
	a.Status.LastPushCommit = "feedface"
	if err := env.Client.Status().Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	event := ""
	for lines.Scan() {
		l := lines.Text()
		if e, ok := strings.CutPrefix(l, "event: "); ok {
			event = e
		}
		if event == "health" && strings.HasPrefix(l, "data: ") {
			if l != `data: {"ok":true}` {
				t.Errorf("health event %s, want ok", l)
			}
			continue
		}
		if strings.HasPrefix(l, "data: ") {
			want := fmt.Sprintf(`{"resource":"imageupdateautomations","namespace":%q,"name":"apps"}`, ns)
			if !strings.Contains(l, want) {
				t.Fatalf("change event %s lacks %s", l, want)
			}
			return
		}
	}
	t.Fatalf("no change event: %v", lines.Err())
}

// A request for another host name is refused: a page on another site
// cannot reach the dashboard by rebinding its own name to 127.0.0.1.
func TestForeignHostRefused(t *testing.T) {
	base := serve(t, env.Config, Options{})
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Host = "attacker.example:9880"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("foreign Host: %d", resp.StatusCode)
	}
}

// A user bound to one namespace, who may not list automations in all of
// them, sees the namespace the kubeconfig names instead of nothing.
func TestNamespaceUserSeesTheirNamespace(t *testing.T) {
	ns := env.Namespace(t)
	automation(t, ns, "apps", nil)
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dashboard-dev"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{imagev1.GroupVersion.Group, updatev1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dashboard-dev"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "dev-" + ns}}}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	user, err := env.AddUser(envtest.User{Name: "dev-" + ns}, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, user.Config(), Options{FallbackNamespace: ns})
	_, body := get(t, base+"/")
	for _, want := range []string{`id="a/` + ns + `/apps"`, "in namespace <strong>" + ns + "</strong>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the Fleet page lacks %s:\n%s", want, body)
		}
	}
}
