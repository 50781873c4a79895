package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/tk-image/internal/migrate"
)

type migrateOptions struct {
	files         []string
	fromCluster   bool
	allNamespaces bool
	output        string
	onlyConverted bool
}

func newMigrateCommand(k *kube) *cobra.Command {
	var o migrateOptions
	cmd := &cobra.Command{
		Use:   "migrate [-f FILE|DIR|-]... | --from-cluster [-n NAMESPACE | -A]",
		Short: "Convert Flux image automation and argocd-image-updater manifests to image-toolkit's",
		Long: `Convert Flux's image automation objects (ImageRepository, ImagePolicy and
ImageUpdateAutomation of image.toolkit.fluxcd.io/v1, v1beta2 or v1beta1) to
image-toolkit's (` + imagev1.GroupVersion.String() + `) and write them to stdout, as
multi-document YAML or, with -o json, as a List.

argocd-image-updater's configuration is converted too: the annotations of its
v0.x releases on Argo CD Applications (argocd-image-updater.argoproj.io/
image-list and the keys beside it; the Application is kept) and its v1.x
ImageUpdater objects (replaced). Each image becomes an ImageRepository and an
ImagePolicy, each Application or applicationRef an ImageUpdateAutomation that
writes Argo CD's override files (update strategy ArgoCD; docs/api.md, "Argo
CD"); what does not map is named in a warning.

Input: the files and directories given with -f (directories are walked for
.yaml, .yml and .json files, hidden directories skipped; - is stdin); stdin
when there is no -f; or, with --from-cluster, the live objects in the cluster
the kubeconfig flags name, in the namespace of -n (else the context's) or in
all namespaces with -A. A kind whose Flux CRD is not installed is skipped
with a note.

Every other document (Deployments, Kustomizations, Flux GitRepositories ...)
is written out unchanged, in its place, so a whole directory can be piped
through; --only-converted leaves them out.

The markers in git need no change: # {"$imagepolicy": "NAMESPACE:NAME"} (and
its :tag, :name and :digest forms) is the same marker to image-toolkit. An
ImageUpdateAutomation keeps its spec.sourceRef: image-toolkit reads Flux's
GitRepository.

Field names are Flux's, so most fields are copied as they are. Where
image-toolkit differs (docs/api.md, "Differences from Flux"), the field is
adjusted, or a warning on stderr names the object and the field; fields
image-toolkit lacks are dropped with a warning; an object that cannot work
(e.g. an ImageUpdateAutomation without spec.git) is an error. Status is
dropped; metadata keeps name, namespace, labels and annotations, less Flux's
reconcile.fluxcd.io/requestedAt and kubectl's last-applied-configuration.
Comments inside the converted objects are not kept.

Exit status: 0 when every object converted, warnings or not; 1 when an input
does not parse or an object cannot be converted (each one named, with its
file and document number; nothing is written); 2 for bad flags.`,
		Example: `  tk-image migrate -f flux/ > image-toolkit.yaml
  kustomize build clusters/prod | tk-image migrate > prod.yaml
  tk-image migrate -f imagepolicies.yaml -f automation.yaml --only-converted
  tk-image migrate --from-cluster -A > image-toolkit.yaml
  tk-image migrate --from-cluster -n flux-system -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, k)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&o.files, "filename", "f", nil, "a file or directory of Flux manifests, - for stdin (repeatable; default stdin)")
	f.BoolVar(&o.fromCluster, "from-cluster", false, "read the Flux objects from the cluster instead of files")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "with --from-cluster, read all namespaces")
	f.StringVarP(&o.output, "output", "o", "yaml", "output format: yaml (multi-document) or json (a List)")
	f.BoolVar(&o.onlyConverted, "only-converted", false, "write only the converted objects, not the other documents of the input")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"yaml", "json"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return cmd
}

func (o *migrateOptions) run(cmd *cobra.Command, k *kube) error {
	if o.output != "yaml" && o.output != "json" {
		return usageError{fmt.Errorf("--output must be yaml or json, got %q", o.output)}
	}
	// -n is kubectl's persistent flag; Changed tells a deliberate -n from
	// the kubeconfig's default namespace.
	nsGiven := cmd.Flags().Changed("namespace")
	switch {
	case o.fromCluster && len(o.files) > 0:
		return usageError{errors.New("--from-cluster reads the cluster: it takes no -f")}
	case !o.fromCluster && (o.allNamespaces || nsGiven):
		return usageError{errors.New("-n and -A choose the namespaces --from-cluster reads; objects from files keep their own namespace")}
	case o.allNamespaces && nsGiven:
		return usageError{errors.New("-A and -n exclude each other")}
	}
	stderr := cmd.ErrOrStderr()
	m := migrate.New(stderr, o.onlyConverted)
	if o.fromCluster {
		if err := o.readCluster(cmd, k, m); err != nil {
			return err
		}
	} else {
		inputs, err := o.inputs(cmd.InOrStdin())
		if err != nil {
			return err
		}
		for _, in := range inputs {
			m.Read(in)
		}
	}
	if n := m.Failed(); n > 0 {
		docs := "documents"
		if n == 1 {
			docs = "document"
		}
		fmt.Fprintf(stderr, "tk-image: %d %s could not be migrated; nothing written\n", n, docs)
		return reportedError{fmt.Errorf("%d documents failed", n)}
	}
	if m.Converted() == 0 && !o.fromCluster {
		fmt.Fprintf(stderr, "note: the input has no %s objects\n", migrate.FluxImageGroup)
	}
	return m.Write(cmd.OutOrStdout(), o.output)
}

// readCluster reads the Flux objects of the namespace of -n (else the
// context's), or of all namespaces with -A.
func (o *migrateOptions) readCluster(cmd *cobra.Command, k *kube, m *migrate.Migration) error {
	cfg, err := k.flags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("reading kubeconfig: %w", err)
	}
	ns := ""
	if !o.allNamespaces {
		if ns, err = k.namespace(); err != nil {
			return err
		}
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return m.ReadCluster(cmd.Context(), disc, dyn, ns)
}

// inputs expands -f into the files to read, in order: a directory's files
// in lexical order. A path that does not exist is a usage error, found
// before anything is read.
func (o *migrateOptions) inputs(stdin io.Reader) ([]migrate.Input, error) {
	files := o.files
	if len(files) == 0 {
		// Waiting for a terminal to type manifests is never what was meant.
		if f, ok := stdin.(*os.File); ok {
			if info, err := f.Stat(); err == nil && info.Mode()&os.ModeCharDevice != 0 {
				return nil, usageError{errors.New("no input: give -f FILE or DIR, pipe manifests on stdin, or use --from-cluster")}
			}
		}
		files = []string{"-"}
	}
	var out []migrate.Input
	stdinUsed := false
	for _, f := range files {
		if f == "-" {
			if stdinUsed {
				return nil, usageError{errors.New("-f - (stdin) can be given once")}
			}
			stdinUsed = true
			out = append(out, migrate.Input{Name: "<stdin>", Stdin: stdin})
			continue
		}
		info, err := os.Stat(f)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, usageError{fmt.Errorf("-f %s: %w", f, err)}
		}
		if !info.IsDir() {
			out = append(out, migrate.Input{Name: f, Path: f})
			continue
		}
		err = filepath.WalkDir(f, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				// .git, .github (whose workflows are YAML too) and the
				// like are not manifests.
				if p != f && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				return nil
			}
			switch strings.ToLower(filepath.Ext(p)) {
			case ".yaml", ".yml", ".json":
				out = append(out, migrate.Input{Name: p, Path: p})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
	}
	return out, nil
}
