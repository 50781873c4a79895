package dashboard

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// health follows whether the API server answers, so that a page says when
// what it shows may be stale instead of calling cached data live. The
// informers retry a lost watch quietly, and a page's own event stream to
// the dashboard stays open while the API server is gone: neither tells
// the page. A probe of /livez every healthEvery (timing out after
// healthTimeout) does, so a page hears of a stop within about 3 s, and so
// does any request of a page that fails to reach the server.
type health struct {
	probe func(context.Context) error
	now   func() time.Time
	// changed is told of each change between answering and not.
	changed func()

	mu sync.Mutex
	// down is when the server stopped answering; zero while it answers.
	down time.Time
	err  string
}

// Health is the API server's state as a page shows it.
type Health struct {
	OK    bool       `json:"ok"`
	Since *time.Time `json:"since,omitempty"`
	Error string     `json:"error,omitempty"`
}

const (
	// healthEvery is how often the API server is probed: a stop shows
	// on the pages within about twice this.
	healthEvery = time.Second
	// healthTimeout bounds one probe.
	healthTimeout = 2 * time.Second
)

// livezProbe asks the API server's /livez with cfg's credentials and TLS;
// every authenticated user may (system:public-info-viewer).
func livezProbe(cfg *rest.Config) (func(context.Context) error, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc := dc.RESTClient()
	return func(ctx context.Context) error {
		return rc.Get().AbsPath("/livez").Do(ctx).Error()
	}, nil
}

func (h *health) run(ctx context.Context) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, healthTimeout)
		err := h.probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.observe(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// observe records the outcome of a request to the API server.
func (h *health) observe(err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	was := h.down.IsZero()
	switch {
	case err == nil:
		h.down, h.err = time.Time{}, ""
	case h.down.IsZero():
		h.down, h.err = h.now(), err.Error()
	default:
		h.err = err.Error()
	}
	now := h.down.IsZero()
	h.mu.Unlock()
	if was != now && h.changed != nil {
		h.changed()
	}
}

// state is the API server's state now; OK when never probed.
func (h *health) state() Health {
	if h == nil {
		return Health{OK: true}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down.IsZero() {
		return Health{OK: true}
	}
	since := h.down
	return Health{Since: &since, Error: h.err}
}
