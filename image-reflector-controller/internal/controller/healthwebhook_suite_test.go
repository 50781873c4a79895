package controller

import (
	"context"
	"net"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"toolkit.dev/image-toolkit/image-reflector-controller/internal/healthhook"
	"toolkit.dev/image-toolkit/pkg/receiver"
	"toolkit.dev/image-toolkit/pkg/runtime/metrics"
)

// healthReceiver is the base URL of the main manager's receiver of
// HealthWebhooks.
var healthReceiver string

// setupHealthReceiver adds the HealthWebhook reconciler and a receiver
// serving HealthWebhooks on a loopback port, as main adds them.
func setupHealthReceiver(mgr ctrl.Manager, rec *metrics.Recorder) error {
	if err := healthhook.SetupIndex(context.Background(), mgr); err != nil {
		return err
	}
	if err := NewHealthWebhookReconciler(mgr.GetClient(), mgr.GetAPIReader(), rec).SetupWithManager(mgr, ctrlOptions()); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	healthReceiver = "http://" + l.Addr().String()
	srv := receiver.New(healthhook.New(mgr.GetClient(), mgr.GetAPIReader()), mgr.GetAPIReader(),
		receiver.NewMetrics("reflector_test", "scan", "Scans"), receiver.Options{Log: logr.Discard(), Status: mgr.GetClient(), CallsFlush: 200 * time.Millisecond})
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return srv.Serve(ctx, l) }))
}
