// Package dashboard serves image-toolkit's web dashboard: what every
// automation is doing, why an image waits, and what failed, read from the
// status the controllers record.
//
// The design follows from where it runs, on an operator's machine beside
// kubectl, during an incident:
//
//   - No auth of its own. It talks to the API server with the user's
//     kubeconfig, as kubectl proxy does, so RBAC decides what each person
//     sees (a kind they may not list is named, not hidden) and may do (a
//     refused action shows the API server's refusal).
//   - Server-side HTML from html/template, so every page reads without
//     JavaScript and every name, label and message is escaped; links are
//     plain URLs to share.
//   - One informer per kind (a watch, through controller-runtime's cache)
//     feeds both the pages and a server-sent event stream. A page's small
//     script reloads its live region when the stream names a change it
//     shows: no polling, no per-object requests.
//   - Everything is embedded (go:embed): no CDN, so it works air-gapped.
//   - Explanations come from tk-image/internal/explain, the code behind
//     tk-image explain, so the page and the command cannot disagree.
//
// Actions (reconcile, suspend, resume, run now) are form POSTs guarded by a
// per-process token and a Host check, since a page on another site could
// otherwise post to a dashboard on localhost with the user's credentials.
// Read-only mode renders no buttons and refuses the POSTs.
package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/update-job-controller/forges"
)

//go:embed assets templates
var embedded embed.FS

// Options configure a dashboard.
type Options struct {
	// ReadOnly renders no action buttons and refuses actions.
	ReadOnly bool
	// Namespace limits the dashboard to one namespace; all when empty.
	Namespace string
	// FallbackNamespace is the namespace shown, without Namespace, when
	// the credentials may not list automations in all namespaces (a
	// developer bound to one namespace): the kubeconfig context's.
	FallbackNamespace string
	// User names who the credentials are, for the header; may be empty.
	User string
	// AllowedHosts are host names requests may name besides localhost and
	// IP addresses: the dashboard's names behind an Ingress.
	AllowedHosts []string
	// Now is the clock (time.Now when nil), for time left.
	Now func() time.Time
	// Debounce gathers changes this long before a page hears of them
	// (200ms when zero), so a burst reloads a page once.
	Debounce time.Duration
}

// Server is the dashboard's http.Handler.
type Server struct {
	opts   Options
	direct client.Client
	store  *store
	access *access
	heads  *heads
	// health is whether the API server answers; nil: not followed.
	health *health
	pages  *pages
	token  string
	mux    *http.ServeMux
}

// New connects to the API server as cfg, starts watching the kinds the
// user may list, and returns the dashboard once its cache has synced. The
// watches end with ctx.
func New(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, opts Options) (*Server, error) {
	// Commit links are the registered forges' pages.
	forges.Register()
	// The buttons ask the authorizer first (SelfSubjectAccessReview).
	if !scheme.Recognizes(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview")) {
		return nil, fmt.Errorf("the scheme lacks %s, which the dashboard asks the authorizer with", authorizationv1.SchemeGroupVersion)
	}
	// client-go's default of 5 requests a second queues a click behind
	// the reads of a few live updates (each Automation page explains
	// itself anew): a click waited 30 s so. kubectl allows 50.
	if cfg.QPS == 0 {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = 50, 100
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	if opts.Namespace == "" && opts.FallbackNamespace != "" {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := direct.List(pctx, &imagev1.ImageUpdateAutomationList{}, client.Limit(1))
		cancel()
		if apierrors.IsForbidden(err) {
			opts.Namespace = opts.FallbackNamespace
		}
	}
	copts := cache.Options{Scheme: scheme}
	if opts.Namespace != "" {
		copts.DefaultNamespaces = map[string]cache.Config{opts.Namespace: {}}
	}
	c, err := cache.New(cfg, copts)
	if err != nil {
		return nil, err
	}
	st, err := startStore(ctx, c, direct, opts.Namespace)
	if err != nil {
		return nil, err
	}
	s, err := newServer(direct, st, opts)
	if err != nil {
		return nil, err
	}
	probe, err := livezProbe(cfg)
	if err != nil {
		return nil, err
	}
	s.health = &health{probe: probe, now: s.opts.Now, changed: st.publishHealth}
	go s.health.run(ctx)
	return s, nil
}

func newServer(direct client.Client, st *store, opts Options) (*Server, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Debounce == 0 {
		opts.Debounce = 200 * time.Millisecond
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, direct: direct, store: st, access: newAccess(direct, opts.Now), heads: newHeads(opts.Now), pages: p, token: hex.EncodeToString(tok), mux: http.NewServeMux()}
	assets, _ := fs.Sub(embedded, "assets")
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", cacheAssets(http.FileServerFS(assets))))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /{$}", s.fleet)
	s.mux.HandleFunc("GET /automations/{namespace}/{name}", s.automation)
	s.mux.HandleFunc("GET /images/{namespace}/{name}", s.image)
	s.mux.HandleFunc("GET /policies/{namespace}/{name}", s.policy)
	s.mux.HandleFunc("GET /jobs/{namespace}/{name}", s.job)
	s.mux.HandleFunc("GET /webhooks", s.webhooks)
	s.mux.HandleFunc("GET /events", s.events)
	s.mux.HandleFunc("POST /actions/{action}/{resource}/{namespace}/{name}", s.act)
	return s, nil
}

// ServeHTTP refuses requests for a Host other than the one served (DNS
// rebinding would otherwise let a web page read the dashboard), then
// routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !allowedHost(r, s.opts.AllowedHosts) {
		http.Error(w, "unexpected Host header: open the dashboard by the address tk-image printed", http.StatusMisdirectedRequest)
		return
	}
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	s.mux.ServeHTTP(w, r)
}

// allowedHost accepts localhost (and *.localhost), IP addresses and the
// names given (an Ingress's), any port. A web page's script can reach the
// dashboard only through a name of its own that it rebinds to 127.0.0.1
// (DNS rebinding); such a name is refused, while localhost and an address
// cannot be rebound, and a name given is the operator's own.
func allowedHost(r *http.Request, names []string) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	for _, n := range names {
		if host != "" && host == strings.TrimSuffix(strings.ToLower(n), ".") {
			return true
		}
	}
	return net.ParseIP(host) != nil
}

// checkToken is the CSRF check of a POST: the form's token, and a browser's
// own word that the request comes from this origin when it gives one.
func (s *Server) checkToken(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(s.token)) == 1
}

func cacheAssets(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		h.ServeHTTP(w, r)
	})
}

// requestTimeout bounds what a page asks of the API server (and of the git
// server, for the Automation page's branch head) beyond the cache.
const requestTimeout = 20 * time.Second

func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), requestTimeout)
}

func (s *Server) serverError(w http.ResponseWriter, err error) {
	http.Error(w, fmt.Sprintf("dashboard: %v", err), http.StatusInternalServerError)
}
