package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/setters"
)

type updateOptions struct {
	dir          string
	policies     []string
	policiesFrom string
	// json are --json values: FILE#POINTER=POLICY.
	json   []string
	dryRun bool
	output string
	krm    bool
	// remote updates a repository (--repository) instead of a directory.
	remote remoteFlags
}

func newUpdateCommand() *cobra.Command {
	var o updateOptions
	cmd := &cobra.Command{
		Use:   "update",
		Short: "Set the image references marked with $imagepolicy comments",
		Long: `Set every value marked with a comment such as
  image: ghcr.io/org/app:1.0 # {"$imagepolicy": "apps:app"}
to the value of the named policy: the whole reference, or with :tag, :name
or :digest after the policy, that part. YAML, Dockerfiles, .env files,
Terraform/OpenTofu (HCL) and TOML files are read, each with markers in its
own comment syntax; JSON, which has no comments, gets its values named with
--json. Only the replaced values change in the files; everything else stays
byte for byte.

With --krm, runs as a KRM function: a ResourceList on stdin, policies in the
functionConfig ConfigMap's data (NAMESPACE:NAME: IMAGE:TAG[@DIGEST]).

With --repository, updates a remote git repository without a cluster, as an
UpdateJob would: clone, update, commit (signed with --signing-key), and push
to --branch (or --push-branch), or propose a pull request (--pull-request,
head branch image-toolkit/BRANCH unless --pr-branch-template). Credentials
come from environment variables and files named by the flags; TLS
certificates and SSH host keys (known_hosts) are always verified.`,
		Example: `  tk-image update --dir ./clusters/prod --policy apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0
  kubectl get imagepolicy -A -o yaml > policies.yaml
  tk-image update --dir . --policies-from policies.yaml --dry-run --output json
  tk-image update --dir ./ecs --json 'task.json#/containerDefinitions/0/image=apps:app' --policy apps:app=ghcr.io/org/app:1.4.0
  kpt fn eval --exec "tk-image update --krm" -- apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0
  tk-image update --repository https://github.com/org/fleet.git --path clusters/prod \
    --policy apps:podinfo=ghcr.io/stefanprodan/podinfo:6.5.0 --author-email bot@example.com \
    --git-username-env GIT_USER --git-password-env GIT_TOKEN --pull-request`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.krm {
				return runKRM(cmd.InOrStdin(), cmd.OutOrStdout())
			}
			if o.remote.asked() {
				return o.runRemote(cmd)
			}
			return o.run(cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", ".", "directory to update")
	f.StringArrayVar(&o.policies, "policy", nil, "a policy value, NAMESPACE:NAME=IMAGE:TAG[@DIGEST] (repeatable)")
	f.StringVar(&o.policiesFrom, "policies-from", "", "a file of ImagePolicy objects (YAML or JSON, e.g. kubectl get imagepolicy -o yaml); their status.latestRef is used")
	f.StringArrayVar(&o.json, "json", nil, "a value of a JSON file to set as a marker would, FILE#POINTER=NAMESPACE:NAME[:tag|:name|:digest], the FILE under --dir (or --path), the POINTER a JSON Pointer such as /containerDefinitions/0/image (repeatable)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print what would change without writing files")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.BoolVar(&o.krm, "krm", false, "run as a KRM function (ResourceList on stdin and stdout)")
	o.remote.add(cmd)
	return cmd
}

func (o *updateOptions) run(stdout, stderr io.Writer) error {
	policies, err := o.readPolicies(stderr)
	if err != nil {
		return err
	}
	if info, err := os.Stat(o.dir); err != nil || !info.IsDir() {
		return usageError{fmt.Errorf("--dir %q is not a directory", o.dir)}
	}

	files, err := o.jsonFiles()
	if err != nil {
		return err
	}
	named, err := setters.NamedFiles(files)
	if err != nil {
		return usageError{err}
	}
	res, err := setters.UpdateDir(o.dir, policies, setters.Options{DryRun: o.dryRun, Named: named})
	if err != nil {
		return err
	}
	o.unnamed(stderr, res)
	return o.report(stdout, stderr, res)
}

// unnamed says on stderr which policies given with --policy no marker
// names, and what the markers there do name: "no changes" alone would not
// tell a typo from a directory already up to date.
func (o *updateOptions) unnamed(stderr io.Writer, res *setters.Result) {
	named := map[string]bool{}
	var names []string
	for _, m := range res.Markers {
		if !named[m.Marker.Policy] {
			named[m.Marker.Policy] = true
			names = append(names, m.Marker.Policy)
		}
	}
	if len(names) == 0 {
		if len(res.Problems) > 0 {
			return // the problems say what became of the markers
		}
		fmt.Fprintf(stderr, "tk-image: no $imagepolicy marker under --dir %s, so nothing is set (a marker is a comment such as # {\"$imagepolicy\": \"NAMESPACE:NAME\"}; tk-image discover --write-markers adds them)\n", o.dir)
		return
	}
	slices.Sort(names)
	if len(names) > 5 {
		names = append(names[:5], "...")
	}
	for _, arg := range o.policies {
		name, _, err := setters.ParsePolicyArg(arg)
		if err == nil && !named[name] {
			fmt.Fprintf(stderr, "tk-image: --policy %s: no marker under --dir %s names %s; the markers there name %s\n", arg, o.dir, name, strings.Join(names, ", "))
		}
	}
}

// jsonFiles are the --json values as the API's update.files.
func (o *updateOptions) jsonFiles() ([]meta.FileUpdate, error) {
	var out []meta.FileUpdate
	for _, arg := range o.json {
		i := strings.LastIndexByte(arg, '=')
		file, pointer, ok := strings.Cut(arg[:max(i, 0)], "#")
		if i < 0 || !ok || file == "" || !strings.HasPrefix(pointer, "/") {
			return nil, usageError{fmt.Errorf("--json %q: want FILE#POINTER=NAMESPACE:NAME[:tag|:name|:digest], e.g. task.json#/containerDefinitions/0/image=apps:app", arg)}
		}
		if _, ok := setters.ParseMarkerValue(arg[i+1:]); !ok {
			return nil, usageError{fmt.Errorf("--json %q: %q is not NAMESPACE:NAME[:tag|:name|:digest]", arg, arg[i+1:])}
		}
		if file = path.Clean(file); path.IsAbs(file) || file == ".." || strings.HasPrefix(file, "../") {
			return nil, usageError{fmt.Errorf("--json %q: %s is not under the directory updated", arg, file)}
		}
		if path.Ext(file) != ".json" {
			return nil, usageError{fmt.Errorf("--json %q: %s is not a .json file; mark the values of YAML, Dockerfiles, .env, HCL and TOML files with a comment", arg, file)}
		}
		out = append(out, meta.FileUpdate{Path: file, Pointer: pointer, Policy: arg[i+1:]})
	}
	return out, nil
}

// readPolicies are the policy values of --policies-from and --policy, for
// a directory and a remote repository alike.
func (o *updateOptions) readPolicies(stderr io.Writer) (setters.Policies, error) {
	if o.output != "text" && o.output != "json" {
		return nil, usageError{fmt.Errorf("--output must be text or json, got %q", o.output)}
	}
	policies := setters.Policies{}
	if o.policiesFrom != "" {
		if err := readPolicies(o.policiesFrom, policies, stderr); err != nil {
			return nil, err
		}
	}
	// --policy wins over the file: it is the more deliberate statement.
	for _, arg := range o.policies {
		name, img, err := setters.ParsePolicyArg(arg)
		if err != nil {
			return nil, usageError{fmt.Errorf("--policy %w", err)}
		}
		policies[name] = img
	}
	if len(policies) == 0 {
		return nil, usageError{errors.New("no policies: give --policy or --policies-from")}
	}
	return policies, nil
}

// report prints what the setters did and fails on files they could not
// update.
func (o *updateOptions) report(stdout, stderr io.Writer, res *setters.Result) error {
	for _, p := range res.Problems {
		fmt.Fprintf(stderr, "tk-image: %v\n", p)
	}
	if o.output == "json" {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		printText(stdout, res, o.dryRun)
	}
	if len(res.Problems) > 0 {
		return reportedError{fmt.Errorf("%d problems", len(res.Problems))}
	}
	return nil
}

func printText(w io.Writer, res *setters.Result, dryRun bool) {
	if len(res.Files) == 0 {
		fmt.Fprintln(w, "no changes")
		return
	}
	printFiles(w, res.Files)
	if dryRun {
		fmt.Fprintln(w, "(dry run: no files written)")
	}
}

// printFiles lists files, objects and changes: what tk-image update and
// tk-image job print.
func printFiles(w io.Writer, files []meta.FileResult) {
	for _, f := range files {
		if f.Operation != "" {
			// A container's change: files, not values.
			fmt.Fprintf(w, "%s (%s)\n", f.Path, f.Operation)
			continue
		}
		fmt.Fprintln(w, f.Path)
		for _, o := range f.Objects {
			fmt.Fprintf(w, "  %s\n", o.ObjectID)
			for _, c := range o.Changes {
				fmt.Fprintf(w, "    %s -> %s (%s)\n", c.OldValue, c.NewValue, c.Setter)
			}
		}
	}
}

func orWord(s, word string) string {
	if s == "" {
		return word
	}
	return s
}

// readObjects reads the objects of a manifest: one, multi-document YAML
// (or JSON), or the items of a List, in order.
func readObjects(r io.Reader) ([]map[string]any, error) {
	dec := k8syaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []map[string]any
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err == io.EOF {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if items, ok := obj["items"].([]any); ok {
			for _, it := range items {
				if m, ok := it.(map[string]any); ok {
					objs = append(objs, m)
				}
			}
			continue
		}
		if obj != nil {
			objs = append(objs, obj)
		}
	}
}

// readPolicies reads ImagePolicy objects, alone, as multi-document YAML, or
// in a List, and records the latestRef of each.
func readPolicies(path string, into setters.Policies, stderr io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return usageError{fmt.Errorf("--policies-from: %w", err)}
	}
	defer f.Close()
	objs, err := readObjects(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, obj := range objs {
		if kind, _ := obj["kind"].(string); kind != "ImagePolicy" {
			continue
		}
		ns, name := str(obj, "metadata", "namespace"), str(obj, "metadata", "name")
		if ns == "" || name == "" {
			return fmt.Errorf("%s: an ImagePolicy lacks metadata.namespace or metadata.name", path)
		}
		img := meta.ImageRef{
			Name:   str(obj, "status", "latestRef", "name"),
			Tag:    str(obj, "status", "latestRef", "tag"),
			Digest: str(obj, "status", "latestRef", "digest"),
		}
		if img.Name == "" || img.Tag == "" {
			fmt.Fprintf(stderr, "tk-image: ImagePolicy %s/%s has no status.latestRef yet; skipped\n", ns, name)
			continue
		}
		into[ns+":"+name] = img
	}
	return nil
}

func str(obj map[string]any, path ...string) string {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	s, _ := cur.(string)
	return s
}

// runKRM runs the KRM function: items of a ResourceList are updated in
// place, and every change is reported as a result.
func runKRM(stdin io.Reader, stdout io.Writer) error {
	fn := framework.ResourceListProcessorFunc(func(rl *framework.ResourceList) error {
		policies, err := krmPolicies(rl.FunctionConfig)
		if err != nil {
			return err
		}
		res := setters.UpdateNodes(rl.Items, policies)
		if len(res.Markers) == 0 && len(rl.Items) > 0 {
			// kustomize build hands transformers its resources without
			// their comments, so a run there never sees a marker; say
			// so rather than succeed silently.
			rl.Results = append(rl.Results, &framework.Result{
				Severity: framework.Warning,
				Message: fmt.Sprintf("no $imagepolicy marker in the %d resources given: nothing to update. "+
					"kustomize build removes comments before transformers see them; "+
					"run this function with kustomize fn run or kpt fn eval over the sources instead", len(rl.Items)),
			})
		}
		for _, f := range res.Files {
			for _, o := range f.Objects {
				for _, c := range o.Changes {
					rl.Results = append(rl.Results, &framework.Result{
						Message:  fmt.Sprintf("%s -> %s (%s)", c.OldValue, c.NewValue, c.Setter),
						Severity: framework.Info,
						ResourceRef: &yaml.ResourceIdentifier{
							TypeMeta: yaml.TypeMeta{APIVersion: o.APIVersion, Kind: o.Kind},
							NameMeta: yaml.NameMeta{Name: o.Name, Namespace: o.Namespace},
						},
						File: &framework.File{Path: f.Path},
					})
				}
			}
		}
		return nil
	})
	return framework.Execute(fn, &kio.ByteReadWriter{Reader: stdin, Writer: stdout})
}

// krmPolicies reads policies from a functionConfig ConfigMap's data:
// NAMESPACE:NAME keys with IMAGE:TAG[@DIGEST] values.
func krmPolicies(cfg *yaml.RNode) (setters.Policies, error) {
	if cfg == nil || cfg.IsNilOrEmpty() {
		return nil, errors.New("no functionConfig: give a ConfigMap with NAMESPACE:NAME: IMAGE:TAG data")
	}
	if cfg.GetKind() != "ConfigMap" {
		return nil, fmt.Errorf("functionConfig must be a ConfigMap, got %s", cfg.GetKind())
	}
	data := cfg.GetDataMap()
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	policies := setters.Policies{}
	for _, k := range keys {
		name, img, err := setters.ParsePolicyArg(k + "=" + strings.TrimSpace(data[k]))
		if err != nil {
			return nil, fmt.Errorf("functionConfig data: %w", err)
		}
		policies[name] = img
	}
	if len(policies) == 0 {
		return nil, errors.New("functionConfig has no policies")
	}
	return policies, nil
}
