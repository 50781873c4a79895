package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

func newJobLogsCommand(k *kube) *cobra.Command {
	var (
		attempt int32
		follow  bool
		tail    int64
	)
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print the logs of a container-mode job's container",
		Long: `Print the logs of the container a container-mode UpdateJob
(spec.update.container) ran: by default those of its last run, the Pod in
status.container; with --attempt, those of the last run of that attempt.
The logs come from the API server (pods/log), so the Pod must still exist
(it goes with the job) and its node must be up.`,
		Example: `  tk-image job logs bump-charts -n apps
  tk-image job logs bump-charts -n apps --attempt 1 --tail 20`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return jobLogs(cmd.Context(), k, args[0], attempt, follow, tail, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().Int32Var(&attempt, "attempt", 0, "the attempt (status.attempts at the time) whose logs to print (default: the last run)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing while the container runs")
	cmd.Flags().Int64Var(&tail, "tail", -1, "print only the last lines (default: all)")
	_ = cmd.RegisterFlagCompletionFunc("attempt", cobra.NoFileCompletions)
	cmd.ValidArgsFunction = completeNames(k, "job", 1)
	return cmd
}

func jobLogs(ctx context.Context, k *kube, name string, attempt int32, follow bool, tail int64, out, errOut io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ns, err := k.namespace()
	if err != nil {
		return err
	}
	c, err := k.client()
	if err != nil {
		return err
	}
	job := &updatev1.UpdateJob{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, job); err != nil {
		return err
	}
	if job.Spec.Update.Container == nil {
		return fmt.Errorf("job %s/%s runs the built-in setters: it has no container, and its outcome is in its status (tk-image get job %s)", ns, name, name)
	}
	pod, err := jobPod(ctx, c, job, attempt)
	if err != nil {
		return err
	}
	cfg, err := k.flags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("reading kubeconfig: %w", err)
	}
	if follow {
		// A followed log is one long request.
		cfg, err = watchGetter{k.flags}.ToRESTConfig()
		if err != nil {
			return err
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// Which run these are, on stderr: the logs stay pipeable.
	fmt.Fprintf(errOut, "==> pod %s/%s, container %s <==\n", ns, pod, updatev1.UserContainerName)
	opts := &corev1.PodLogOptions{Container: updatev1.UserContainerName, Follow: follow}
	if tail >= 0 {
		opts.TailLines = &tail
	}
	stream, err := cs.CoreV1().Pods(ns).GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return fmt.Errorf("logs of container %s of pod %s/%s: %w", updatev1.UserContainerName, ns, pod, err)
	}
	defer stream.Close()
	_, err = io.Copy(out, stream)
	return err
}

// jobPod names the Pod of the job's last run, or of the last round of
// attempt.
func jobPod(ctx context.Context, c client.Client, job *updatev1.UpdateJob, attempt int32) (string, error) {
	if attempt <= 0 {
		if st := job.Status.Container; st != nil && st.PodName != "" {
			return st.PodName, nil
		}
		return "", fmt.Errorf("job %s/%s has not started a container yet (phase %q)", job.Namespace, job.Name, job.Status.Phase)
	}
	pods := &corev1.PodList{}
	err := c.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{
		updatev1.PodJobUIDLabel:  string(job.UID),
		updatev1.PodAttemptLabel: strconv.Itoa(int(attempt)),
	})
	if err != nil {
		return "", err
	}
	best, bestRound := "", -1
	for _, p := range pods.Items {
		if r, err := strconv.Atoi(p.Labels[updatev1.PodRoundLabel]); err == nil && r > bestRound {
			best, bestRound = p.Name, r
		}
	}
	if best == "" {
		return "", fmt.Errorf("job %s/%s has no pod of attempt %d (it made %d attempts; pods go with the job)",
			job.Namespace, job.Name, attempt, job.Status.Attempts)
	}
	return best, nil
}
