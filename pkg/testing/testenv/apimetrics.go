package testenv

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// APIRequests is the API server's own count (apiserver_request_total, all
// clients) of the requests on resources that are not watches: what a
// controller that says it watches rather than polls must not add to while
// idle. The read of /metrics itself is on no resource.
func APIRequests(ctx context.Context, cfg *rest.Config, resources ...string) (float64, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return 0, err
	}
	raw, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		if !slices.ContainsFunc(resources, func(r string) bool { return strings.Contains(line, `resource="`+r+`"`) }) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		total += v
	}
	return total, nil
}
