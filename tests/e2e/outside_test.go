package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// A user who runs a controller binary on their machine with only KUBECONFIG
// set, and no flags, gets a running controller: leader election takes the
// kubeconfig context's namespace (as kubectl would) instead of refusing to
// start outside a cluster, and state goes under the user's cache directory
// instead of /data or /cache. Only the two listen addresses are set, so
// the test can run beside others.
func TestControllersStartOutsideClusterWithDefaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, bin := localenv.StartTest(t)

	const ns = "team-local"
	if err := cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// The admin kubeconfig, with the namespace on its current context.
	kc, err := clientcmd.LoadFromFile(cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kc.Contexts[kc.CurrentContext].Namespace = ns
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := []string{"KUBECONFIG=" + kubeconfig, "HOME=" + home, "PATH=" + os.Getenv("PATH")}

	for _, name := range localenv.Controllers {
		t.Run(name, func(t *testing.T) {
			p, err := cluster.StartWith(ctx, bin, name, name+"-bare", env)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := p.Stop(20 * time.Second); err != nil {
					t.Errorf("%s did not exit cleanly: %v\n%s", name, err, p.Log())
				}
			}()
			if _, err := os.Stat(filepath.Join(home, ".cache", "image-toolkit", name)); name != "image-automation-controller" && err != nil {
				t.Errorf("state directory under the user's cache: %v", err)
			}
			if name == "update-job-controller" {
				return // every replica runs jobs: no leader, no Lease
			}
			// The Lease is taken in the context's namespace, and the log
			// says where the namespace came from.
			lease := &coordinationv1.Lease{}
			testenv.Eventually(t, 60*time.Second, func() (bool, error) {
				err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + ".toolkit.dev"}, lease)
				return err == nil && lease.Spec.HolderIdentity != nil, client.IgnoreNotFound(err)
			})
			if log := p.Log(); !strings.Contains(log, `"namespace":"`+ns+`","from":"kubeconfig context`) {
				t.Errorf("the log does not say the leader election namespace %q came from the kubeconfig context:\n%s", ns, log)
			}
		})
	}
}
