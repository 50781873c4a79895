package dashboard

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// pages are the parsed templates, one set per page: the layout and the
// page's own file.
type pages struct {
	byName map[string]*template.Template
}

var pageNames = []string{"fleet", "automation", "image", "policy", "job", "webhooks", "result"}

func parsePages() (*pages, error) {
	p := &pages{byName: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(embedded, "templates/layout.html", "templates/policy-section.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		p.byName[name] = t
	}
	return p, nil
}

var funcs = template.FuncMap{
	"ago":   ago,
	"since": since,
	"short": shortCommit,
	"rfc3339": func(t any) string {
		if tt, ok := timeOf(t); ok {
			return tt.UTC().Format(time.RFC3339)
		}
		return ""
	},
	"stateKinds": func() []StateKind { return stateKinds },
	"join":       strings.Join,
	"pathEscape": url.PathEscape,
	// policyURL is the page of a policy named NAMESPACE:NAME, as markers
	// name it.
	"policyURL": func(key string) string {
		ns, name, ok := updatev1.SplitPolicyKey(key)
		if !ok {
			return ""
		}
		return "/policies/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
	},
	"timeLeft": func(t any, now time.Time) string {
		tt, _ := timeOf(t)
		return TimeLeft(tt, now)
	},
	"dict": func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	},
}

// timeOf reads the API's time types, nil pointers as no time.
func timeOf(t any) (time.Time, bool) {
	var out time.Time
	switch t := t.(type) {
	case metav1.Time:
		out = t.Time
	case *metav1.Time:
		if t != nil {
			out = t.Time
		}
	case metav1.MicroTime:
		out = t.Time
	case *metav1.MicroTime:
		if t != nil {
			out = t.Time
		}
	case time.Time:
		out = t
	}
	return out, !out.IsZero()
}

// ago says how long ago t was, to the minute; "never" for no time.
func ago(t any, now time.Time) string {
	tt, ok := timeOf(t)
	if !ok {
		return "never"
	}
	d := now.Sub(tt)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// since is when t was as a clock reads it, with how long ago: the time
// alone within the last day, the date too before that.
func since(t any, now time.Time) string {
	tt, ok := timeOf(t)
	if !ok {
		return "an unknown time"
	}
	layout := "15:04:05 UTC"
	if now.Sub(tt) > 24*time.Hour {
		layout = "2006-01-02 15:04 UTC"
	}
	return tt.UTC().Format(layout) + ", " + ago(tt, now)
}

// shortCommit is a commit hash as people read it, from a revision such as
// main@sha1:<hash> or a bare hash.
func shortCommit(rev string) string {
	if i := strings.LastIndex(rev, ":"); i >= 0 {
		rev = rev[i+1:]
	}
	if len(rev) > 10 {
		return rev[:10]
	}
	return rev
}

// view is what every page's layout reads.
type view struct {
	Title string
	// Events is the event stream the page listens to; its scope is the
	// namespace the page shows (all when empty).
	Events string
	User   string
	// Scope is the one namespace the dashboard shows; empty for all.
	Scope    string
	ReadOnly bool
	Token    string
	Denied   []string
	Now      time.Time
	// Back is where an action returns to: this page.
	Back string
	// Health is whether the API server answers: while it does not, the
	// page says since when, and marks what it shows as stale.
	Health Health
	Body   any
}

func (s *Server) view(r *http.Request, title, namespace string, body any) view {
	v := view{Title: title, User: s.opts.User, Scope: s.opts.Namespace, ReadOnly: s.opts.ReadOnly, Token: s.token, Now: s.opts.Now(),
		Back: backTo(r.URL), Body: body, Events: "/events", Health: s.health.state()}
	if namespace != "" {
		v.Events += "?namespace=" + url.QueryEscape(namespace)
	}
	for _, w := range watchedKinds {
		if why, ok := s.store.denied[w.resource]; ok {
			v.Denied = append(v.Denied, why)
		}
	}
	return v
}

// backTo is the page a request shows, for an action to return to: its
// path and query without partial, which only the page's script asks for.
func backTo(u *url.URL) string {
	q := u.Query()
	q.Del("partial")
	back := u.EscapedPath()
	if len(q) > 0 {
		back += "?" + q.Encode()
	}
	return back
}

// render writes a page, or with ?partial=1 only its live region, which
// the page's script swaps in when the event stream names a change.
func (s *Server) render(w http.ResponseWriter, r *http.Request, name string, status int, v view) {
	tmpl := "layout"
	if r.URL.Query().Get("partial") == "1" {
		tmpl = "live"
	}
	var buf bytes.Buffer
	if err := s.pages.byName[name].ExecuteTemplate(&buf, tmpl, v); err != nil {
		s.serverError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Vary", "Accept-Encoding")
	// A Fleet page of a thousand automations is megabytes of HTML that
	// compresses twentyfold.
	if buf.Len() > minGzip && acceptsGzip(r) {
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(status)
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		_, _ = zw.Write(buf.Bytes())
		_ = zw.Close()
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// minGzip is the size below which compressing a page is not worth it.
const minGzip = 8 << 10

func acceptsGzip(r *http.Request) bool {
	for _, enc := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if name, _, _ := strings.Cut(strings.TrimSpace(enc), ";"); name == "gzip" {
			return true
		}
	}
	return false
}

// fleetBody is the Fleet page.
type fleetBody struct {
	Filter     FleetFilter
	Namespaces []string
	Rows       []FleetRow
	// Total counts every automation, Counts those of each state, before
	// the state filter and search.
	Total  int
	Counts map[StateKind]int
}

func (s *Server) fleet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := FleetFilter{Namespace: q.Get("namespace"), State: q.Get("state"), Search: q.Get("q")}
	body, err := s.fleetBody(r.Context(), f)
	if err != nil {
		s.serverError(w, err)
		return
	}
	s.render(w, r, "fleet", http.StatusOK, s.view(r, "Fleet", f.Namespace, body))
}

func (s *Server) fleetBody(ctx context.Context, f FleetFilter) (*fleetBody, error) {
	var autos imagev1.ImageUpdateAutomationList
	var policies imagev1.ImagePolicyList
	var jobs updatev1.UpdateJobList
	if err := s.store.list(ctx, "imageupdateautomations", &autos); err != nil {
		return nil, err
	}
	if err := s.store.list(ctx, "imagepolicies", &policies); err != nil {
		return nil, err
	}
	if err := s.store.list(ctx, "updatejobs", &jobs); err != nil {
		return nil, err
	}
	policiesByNS := map[string][]imagev1.ImagePolicy{}
	for _, p := range policies.Items {
		policiesByNS[p.Namespace] = append(policiesByNS[p.Namespace], p)
	}
	jobsByNS := map[string][]updatev1.UpdateJob{}
	for _, j := range jobs.Items {
		jobsByNS[j.Namespace] = append(jobsByNS[j.Namespace], j)
	}
	objs := map[string]*namespaceObjects{}
	now := s.opts.Now()
	body := &fleetBody{Filter: f, Counts: map[StateKind]int{}}
	seen := map[string]bool{}
	for i := range autos.Items {
		a := &autos.Items[i]
		if !seen[a.Namespace] {
			seen[a.Namespace] = true
			body.Namespaces = append(body.Namespaces, a.Namespace)
		}
		if f.Namespace != "" && a.Namespace != f.Namespace {
			continue
		}
		o := objs[a.Namespace]
		if o == nil {
			o = newNamespaceObjects(policiesByNS[a.Namespace], jobsByNS[a.Namespace])
			objs[a.Namespace] = o
		}
		row := fleetRow(a, o, now)
		body.Total++
		body.Counts[row.State.Kind]++
		if f.Match(row) {
			row.Actions = s.controls(ctx, "imageupdateautomations", row.Namespace, row.Name, row.Suspended, row.Holds, nil)
			body.Rows = append(body.Rows, row)
		}
	}
	slices.Sort(body.Namespaces)
	// Most urgent first, then by name: what is broken is on top.
	slices.SortStableFunc(body.Rows, func(x, y FleetRow) int {
		if d := slices.Index(stateKinds, x.State.Kind) - slices.Index(stateKinds, y.State.Kind); d != 0 {
			return d
		}
		return strings.Compare(x.Namespace+"/"+x.Name, y.Namespace+"/"+y.Name)
	})
	return body, nil
}
