package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/registry"
	"toolkit.dev/image-toolkit/image-reflector-controller/internal/store"
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

// helmChart is a chart of a Helm repository reached over HTTP(S): an
// ImageRepository whose spec.image is http(s)://REPOSITORY/CHART.
type helmChart struct {
	// index is REPOSITORY/index.yaml, where Helm reads the versions.
	index *url.URL
	chart string
}

// isHelmChart reports whether spec.image names a chart of an HTTP(S) Helm
// repository rather than an OCI repository.
func isHelmChart(obj *imagev1.ImageRepository) bool {
	img := strings.ToLower(obj.Spec.Image)
	return strings.HasPrefix(img, "https://") || strings.HasPrefix(img, "http://")
}

// chartNamePattern is what a chart name may be in the URL: Helm asks for
// lower-case words and dashes; indexes in the wild also have capitals,
// dots and underscores.
var chartNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// parseHelmChart checks an http(s):// spec.image: the repository URL as
// given to `helm repo add`, then "/" and the chart name, as an OCI chart is
// oci://REGISTRY/PATH/CHART. Credentials, a query or a fragment in it are
// refused: the first belong in secretRef, the others would not reach the
// index the way Helm reads it.
func parseHelmChart(obj *imagev1.ImageRepository) (*helmChart, error) {
	img := obj.Spec.Image
	u, err := url.Parse(img)
	if err != nil {
		return nil, fmt.Errorf("Helm chart URL %q does not parse: %w", img, err)
	}
	switch {
	case u.Host == "":
		return nil, fmt.Errorf("Helm chart URL %q has no host", img)
	case u.User != nil:
		return nil, fmt.Errorf("Helm chart URL %q holds credentials; put them in the Secret of spec.secretRef", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(img, "?") || strings.HasSuffix(img, "#"):
		return nil, fmt.Errorf("Helm chart URL %q has a query or fragment; give http(s)://REPOSITORY/CHART", img)
	case u.Scheme == "http" && !obj.Spec.Insecure:
		return nil, fmt.Errorf("Helm chart URL %q is plain HTTP: set spec.insecure to allow it", img)
	}
	dir, chart := path.Split(u.Path)
	if !chartNamePattern.MatchString(chart) {
		return nil, fmt.Errorf("Helm chart URL %q does not end in a chart name; give http(s)://REPOSITORY/CHART, "+
			"e.g. https://stefanprodan.github.io/podinfo/podinfo", img)
	}
	repoURL := &url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host), Path: strings.TrimSuffix(dir, "/")}
	return &helmChart{index: registry.HelmIndexURL(repoURL), chart: chart}, nil
}

// name is the canonical name of the chart, as status.canonicalImageName
// shows it: the repository URL with its host in lower case, and the chart.
func (h *helmChart) name() string {
	return strings.TrimSuffix(h.index.String(), "/index.yaml") + "/" + h.chart
}

// parseImage checks spec.image: a repository, without scheme, tag or digest.
func parseImage(obj *imagev1.ImageRepository) (name.Repository, error) {
	img := obj.Spec.Image
	if rest, ok := strings.CutPrefix(img, "oci://"); ok {
		return name.Repository{}, fmt.Errorf("image %q has a scheme: an OCI chart repository is a registry, give %s", img, rest)
	}
	if strings.Contains(img, "://") {
		return name.Repository{}, fmt.Errorf("image %q has a scheme; give host/path, and set spec.insecure for plain HTTP "+
			"(http(s):// is for a chart of a Helm repository)", img)
	}
	var opts []name.Option
	if obj.Spec.Insecure {
		opts = append(opts, name.Insecure)
	}
	// NewRepository rejects tags and digests: ':' and '@' are not valid
	// in a repository path.
	repo, err := name.NewRepository(img, opts...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("image %q is not a repository reference (no tag or digest): %w", img, err)
	}
	return repo, nil
}

func compileExclusions(list []string) ([]*regexp.Regexp, error) {
	out := make([]*regexp.Regexp, 0, len(list))
	for _, e := range list {
		re, err := regexp.Compile(e)
		if err != nil {
			return nil, fmt.Errorf("exclusionList entry %q: %w", e, err)
		}
		out = append(out, re)
	}
	return out, nil
}

// filterTags drops excluded tags and sorts the rest; it returns them and
// how many it dropped.
func filterTags(tags []string, exclude []*regexp.Regexp) ([]string, int) {
	out := make([]string, 0, len(tags))
next:
	for _, t := range tags {
		for _, re := range exclude {
			if re.MatchString(t) {
				continue next
			}
		}
		out = append(out, t)
	}
	sort.Strings(out)
	return out, len(tags) - len(out)
}

// revision is the sha256 of the sorted tag set.
func revision(sorted []string) string {
	h := sha256.New()
	for _, t := range sorted {
		h.Write([]byte(t))
		h.Write([]byte{'\n'})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// latestTags are the first n tags in descending string order, as Flux
// reports them.
func latestTags(sorted []string, n int) []string {
	out := make([]string, 0, min(n, len(sorted)))
	for i := len(sorted) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, sorted[i])
	}
	return out
}

// recentTags are the n tags of e first seen last, newest first (ties in
// descending string order, as LatestTags), with their build times where
// known: what the dashboard's image page lists. Tags first seen when the
// oldest were, by the first scan, are left out unless their build time is
// known: the first scan saw them all at once, so none is newer than
// another, and ten of them with the scan's time would only repeat
// LatestTags at twice its size in every ImageRepository's status, which
// the API server decodes, validates and stores on each write. One pass
// over the tags for the oldest and one keeping the best n, since a
// repository may hold a million.
func recentTags(e store.Entry, n int) []imagev1.TagTimes {
	if len(e.Times) != len(e.Tags) || n <= 0 || len(e.Tags) == 0 {
		return nil
	}
	oldest := e.Times[0].Seen
	for _, t := range e.Times[1:] {
		if t.Seen.Before(oldest) {
			oldest = t.Seen
		}
	}
	newer := func(i, j int) bool {
		if a, b := e.Times[i].Seen, e.Times[j].Seen; !a.Equal(b) {
			return a.After(b)
		}
		return e.Tags[i] > e.Tags[j]
	}
	best := make([]int, 0, n+1)
	for i := range e.Tags {
		if e.Times[i].Seen.Equal(oldest) && e.Times[i].Created.IsZero() {
			continue
		}
		if len(best) == n && !newer(i, best[n-1]) {
			continue
		}
		at := len(best)
		for at > 0 && newer(i, best[at-1]) {
			at--
		}
		best = slices.Insert(best, at, i)
		if len(best) > n {
			best = best[:n]
		}
	}
	if len(best) == 0 {
		return nil
	}
	out := make([]imagev1.TagTimes, len(best))
	for k, i := range best {
		out[k] = imagev1.TagTimes{Tag: e.Tags[i], FirstSeen: metav1.NewTime(e.Times[i].Seen)}
		if c := e.Times[i].Created; !c.IsZero() {
			out[k].Created = &metav1.Time{Time: c}
		}
	}
	return out
}

// freshScans remembers the last scan of each key, so repositories that share
// image and credentials share a scan within their interval.
type freshScans struct {
	mu sync.Mutex
	m  map[string]freshScan
}

type freshScan struct {
	object string
	at     time.Time
}

func (f *freshScans) get(key string) (freshScan, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.m[key]
	return s, ok
}

func (f *freshScans) put(key, object string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]freshScan{}
	}
	if cur, ok := f.m[key]; !ok || at.After(cur.at) {
		f.m[key] = freshScan{object, at}
	}
}

// ScanMetrics are the reflector's scan metrics.
type ScanMetrics struct {
	Duration   prometheus.Histogram
	Scans      *prometheus.CounterVec
	StoredTags *metrics.ObjectGauge
	StoreBytes prometheus.Gauge
}

// NewScanMetrics returns unregistered scan metrics.
func NewScanMetrics() *ScanMetrics {
	const ns, sub = "imagetoolkit", "reflector"
	return &ScanMetrics{
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "scan_duration_seconds", Help: "Duration of registry scans (all pages of tags/list).",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}}),
		Scans: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "scans_total", Help: "Scans by result: scanned (from the registry), shared (another repository's recent scan), failed."},
			[]string{"result"}),
		StoredTags: metrics.NewObjectGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "stored_tags", Help: "Tags stored per ImageRepository."}, "namespace", "name"),
		StoreBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "store_size_bytes", Help: "Bytes the tag store occupies on disk."}),
	}
}

// Collectors returns the metrics to register.
func (m *ScanMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Duration, m.Scans, m.StoredTags, m.StoreBytes}
}
