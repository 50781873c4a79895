package testflux

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
)

// NotificationController is the binary under NotificationOptions.Bin, as
// hack/tools/notification-controller ships it with crds/ beside it.
const NotificationController = "notification-controller"

// Notification is a running notification-controller.
type Notification struct {
	*Flux
	// EventsURL is its event endpoint, where Flux's controllers post
	// their events (their --events-addr).
	EventsURL string
}

// StartNotification installs notification-controller's CRDs and starts it
// against o.Config (o.Bin is bin/notification-controller), stopped at the
// end of the test, as Start starts the other two.
func StartNotification(t testing.TB, o Options) *Notification {
	t.Helper()
	testenv.NeedTool(t, filepath.Join(o.Bin, NotificationController), "flux-tools")
	made := o.Dir == ""
	if made {
		dir, err := os.MkdirTemp("", "testflux-notification-")
		if err != nil {
			t.Fatal(err)
		}
		o.Dir = dir
	}
	n, err := startNotification(o)
	if n == nil {
		n = &Notification{Flux: &Flux{dir: o.Dir}}
	}
	t.Cleanup(func() { n.cleanup(t, made) })
	if err != nil {
		t.Fatalf("testflux: %v\n%s", err, n.Diagnose())
	}
	return n
}

func startNotification(o Options) (*Notification, error) {
	if o.Namespace == "" {
		o.Namespace = "flux-system"
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := installCRDs(ctx, o.Config, filepath.Join(o.Bin, crdDir)); err != nil {
		return nil, fmt.Errorf("installing notification-controller's CRDs: %w", err)
	}
	kubeconfig := filepath.Join(o.Dir, "kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, o.Config, ""); err != nil {
		return nil, err
	}
	n := &Notification{Flux: &Flux{dir: o.Dir}}
	env := []string{"KUBECONFIG=" + kubeconfig, "RUNTIME_NAMESPACE=" + o.Namespace}
	for attempt := 1; ; attempt++ {
		ports, err := testenv.FreePorts(4)
		if err != nil {
			return n, err
		}
		addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
		err = n.run(NotificationController, o.Bin, env, "--log-encoding=console", "--log-level=debug", "--enable-leader-election=false",
			"--events-addr="+addr(0), "--receiverAddr="+addr(1), "--metrics-addr="+addr(2), "--health-addr="+addr(3))
		if err == nil {
			err = n.procs[0].ready(ctx, "http://"+addr(3)+"/readyz")
		}
		if err == nil {
			n.EventsURL = "http://" + addr(0) + "/"
			return n, nil
		}
		if attempt == 3 || !n.logsSay("address already in use") {
			return n, err
		}
		n.stop()
		n.procs = nil
	}
}

// Diagnose names the controller's log and returns its last lines.
func (n *Notification) Diagnose() string {
	return fmt.Sprintf("--- %s (%s), last lines:\n%s\n", NotificationController, n.LogPath(NotificationController), tail(n.LogPath(NotificationController), 8<<10))
}
