package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// writeHealth sends the API server's state as a "health" event: a page
// shows a banner while it does not answer, and reloads once it does.
func (s *Server) writeHealth(w http.ResponseWriter) {
	data, _ := json.Marshal(s.health.state())
	fmt.Fprintf(w, "event: health\ndata: %s\n\n", data)
}

// heartbeat keeps an idle event stream open through proxies, and tells a
// closed one apart sooner.
const heartbeat = 25 * time.Second

// events streams the changes the informers see as server-sent events: one
// "change" event per burst (gathered for Options.Debounce) listing what
// changed, in the namespace asked for (all when none). A page reloads its
// live region when a change concerns it.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ns := r.URL.Query().Get("namespace")
	sub := s.store.subscribe()
	defer s.store.unsubscribe(sub)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	// A reconnecting browser waits a second, not the default three.
	fmt.Fprint(w, "retry: 1000\n: connected\n\n")
	s.writeHealth(w)
	flusher.Flush()
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-beat.C:
			fmt.Fprint(w, ": ping\n\n")
			flusher.Flush()
		case <-sub.notify:
			select {
			case <-r.Context().Done():
				return
			case <-time.After(s.opts.Debounce):
			}
			var changes []Change
			taken, healthChanged := sub.take()
			for _, c := range taken {
				if ns == "" || c.Namespace == ns {
					changes = append(changes, c)
				}
			}
			if healthChanged {
				s.writeHealth(w)
				flusher.Flush()
			}
			if len(changes) == 0 {
				continue
			}
			data, _ := json.Marshal(changes)
			fmt.Fprintf(w, "event: change\ndata: %s\n\n", data)
			flusher.Flush()
		}
	}
}
