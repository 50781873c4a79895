package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"toolkit.dev/image-toolkit/pkg/commitmsg"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/git/refname"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// remoteFlags describe tk-image update --repository: a whole update of a
// remote repository without a cluster (clone, set the policies' values,
// commit, sign, push or propose), run by the write-back engine the
// update-job-controller runs. Secrets never come on the command line: the
// flags name environment variables and files.
type remoteFlags struct {
	repository, branch, path   string
	pushBranch, pushRefspec    string
	authorName, authorEmail    string
	commitTemplate             string
	commitValues               []string
	usernameEnv, passwordEnv   string
	bearerTokenEnv             string
	sshKey, sshPassphraseEnv   string
	knownHosts, caFile         string
	signingKey, signingKeyType string
	signingPassphraseEnv       string
	forgeTokenEnv              string
	mirrorDir                  string
	timeout                    time.Duration
	pr                         pullRequestFlags
	fs                         *pflag.FlagSet
}

// signingKeyTypes are the kinds of --signing-key.
var signingKeyTypes = []string{"gpg", "ssh"}

func (r *remoteFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	r.fs = fl
	fl.StringVar(&r.repository, "repository", "", "update this git repository (https://, http://, ssh:// or user@host:path) instead of --dir: clone, update, commit, push or propose (needs a tk-image built with cgo)")
	fl.StringVar(&r.branch, "branch", "main", "with --repository: the branch to check out and update")
	fl.StringVar(&r.path, "path", "", "with --repository: the directory of the repository to update (default: all of it)")
	fl.StringVar(&r.pushBranch, "push-branch", "", "with --repository: push to this branch, rewritten to the checkout plus the commit (default: --branch)")
	fl.StringVar(&r.pushRefspec, "push-refspec", "", "with --repository: push to this refspec, [+]HEAD:DESTINATION: alone, instead of the branch; with --push-branch, as well (Flux's push.refspec)")
	fl.StringVar(&r.authorName, "author-name", "tk-image", "with --repository: the commit author's name")
	fl.StringVar(&r.authorEmail, "author-email", "", "with --repository: the commit author's email (required)")
	fl.StringVar(&r.commitTemplate, "commit-template", "", "with --repository: commit message template (Go text/template); @FILE reads it from a file")
	fl.StringArrayVar(&r.commitValues, "commit-value", nil, "with --repository: a KEY=VALUE the templates see as .Values.KEY (repeatable)")
	fl.StringVar(&r.usernameEnv, "git-username-env", "", "environment variable holding the HTTP user name")
	fl.StringVar(&r.passwordEnv, "git-password-env", "", "environment variable holding the HTTP password or token")
	fl.StringVar(&r.bearerTokenEnv, "git-bearer-token-env", "", "environment variable holding an HTTP bearer token")
	fl.StringVar(&r.sshKey, "ssh-key", "", "file of the SSH private key, for an ssh repository URL")
	fl.StringVar(&r.sshPassphraseEnv, "ssh-key-passphrase-env", "", "environment variable holding the SSH key's passphrase")
	fl.StringVar(&r.knownHosts, "known-hosts", "", "known_hosts file the SSH server's key is checked against (default: ~/.ssh/known_hosts)")
	fl.StringVar(&r.caFile, "git-ca-file", "", "PEM file of the CA certificates the HTTPS server is verified with (default: the system's)")
	fl.StringVar(&r.signingKey, "signing-key", "", "file of the key the commit is signed with (an armored OpenPGP key, or an SSH private key)")
	fl.StringVar(&r.signingKeyType, "signing-key-type", "gpg", "kind of --signing-key: "+strings.Join(signingKeyTypes, " or "))
	fl.StringVar(&r.signingPassphraseEnv, "signing-key-passphrase-env", "", "environment variable holding the signing key's passphrase")
	fl.StringVar(&r.forgeTokenEnv, "forge-token-env", "", "with --pull-request: environment variable holding the forge API token (default: the git password or bearer token)")
	fl.StringVar(&r.mirrorDir, "mirror-dir", "", "directory that keeps the repository's mirror between runs (default: a temporary one)")
	fl.DurationVar(&r.timeout, "git-timeout", time.Minute, "bound of each git network operation")
	r.pr.add(fl)
	// A Kubernetes Secret means nothing without a cluster: the flag stays
	// (its refusal names --forge-token-env) but help does not offer it.
	_ = fl.MarkHidden("pr-secret")
	if f := fl.Lookup("pr-branch-template"); f != nil {
		f.Usage = "head branch template (Go text/template); @FILE reads it from a file (default: image-toolkit/BRANCH, the checkout branch's name)"
	}
	r.pr.complete(cmd)
	_ = cmd.RegisterFlagCompletionFunc("signing-key-type", cobra.FixedCompletions(signingKeyTypes, cobra.ShellCompDirectiveNoFileComp))
}

// asked reports whether the command line asks for a remote update: any of
// its flags, so that one given without --repository is refused rather
// than ignored.
func (r *remoteFlags) asked() bool {
	asked := false
	r.fs.Visit(func(f *pflag.Flag) {
		if f.Name == "repository" || remoteOnly[f.Name] || strings.HasPrefix(f.Name, prFlagPrefix) || f.Name == "pull-request" {
			asked = true
		}
	})
	return asked
}

// remoteOnly are the flags that mean nothing without --repository.
var remoteOnly = map[string]bool{
	"branch": true, "path": true, "push-branch": true, "push-refspec": true, "author-name": true, "author-email": true,
	"commit-template": true, "commit-value": true, "git-username-env": true, "git-password-env": true,
	"git-bearer-token-env": true, "ssh-key": true, "ssh-key-passphrase-env": true, "known-hosts": true, "git-ca-file": true,
	"signing-key": true, "signing-key-type": true, "signing-key-passphrase-env": true, "forge-token-env": true,
	"mirror-dir": true, "git-timeout": true,
}

// localRepositoryFlag refuses a --repository that is a local checkout:
// the engine clones over https, http or ssh, as an UpdateJob does; a
// checkout on this machine is what --dir updates.
func localRepositoryFlag(repo string) error {
	if why := writeback.LocalRepository(repo); why != "" {
		return usageError{fmt.Errorf("--repository %q %s: --repository clones over https, http or ssh, as an UpdateJob does; to update a checkout on this machine, use --dir (tk-image update --dir %s ...) and commit yourself", repo, why, strings.TrimPrefix(repo, "file://"))}
	}
	return nil
}

// needRepository refuses remote flags given without --repository.
func (r *remoteFlags) needRepository() error {
	if r.repository == "" {
		return usageError{errors.New("--branch, --path, --push-*, --pr-* and the credential flags need --repository")}
	}
	return nil
}

// plan is the write-back the flags ask for.
func (r *remoteFlags) plan(policies setters.Policies) (writeback.Plan, error) {
	if err := r.needRepository(); err != nil {
		return writeback.Plan{}, err
	}
	if err := localRepositoryFlag(r.repository); err != nil {
		return writeback.Plan{}, err
	}
	if r.authorEmail == "" {
		return writeback.Plan{}, usageError{errors.New("--repository needs --author-email")}
	}
	// A path that leaves the repository is refused, not rewritten to one
	// that stays (../x became x).
	cleanPath := path.Clean("/" + r.path)[1:]
	if p := path.Clean(r.path); r.path != "" && (p == ".." || strings.HasPrefix(p, "../") || path.IsAbs(p)) {
		return writeback.Plan{}, usageError{fmt.Errorf("--path %q leaves the repository: give a directory from the repository's root, e.g. clusters/prod", r.path)}
	}
	// The flags' own words before the plan's (Plan.Validate names the
	// API's fields: "nothing to push to", "push branch").
	switch {
	case r.branch == "":
		return writeback.Plan{}, usageError{errors.New("--branch is empty: give the branch to check out, e.g. main")}
	case !refname.Branch(r.branch):
		return writeback.Plan{}, usageError{fmt.Errorf("--branch %q is not a valid branch name", r.branch)}
	case r.pushBranch != "" && !refname.Branch(r.pushBranch):
		return writeback.Plan{}, usageError{fmt.Errorf("--push-branch %q is not a valid branch name", r.pushBranch)}
	}
	tmpl, err := readTemplate("--commit-template", r.commitTemplate)
	if err != nil {
		return writeback.Plan{}, err
	}
	values, err := parseKeyValueList(r.commitValues)
	if err != nil {
		return writeback.Plan{}, usageError{fmt.Errorf("--commit-value: %w", err)}
	}
	if err := commitmsg.Validate(tmpl, values); err != nil {
		return writeback.Plan{}, usageError{fmt.Errorf("--commit-template: %w", err)}
	}
	p := writeback.Plan{
		Repository: r.repository,
		Timeout:    r.timeout,
		Checkout:   writeback.Ref{Branch: r.branch},
		Path:       cleanPath,
		Update:     writeback.Update{Images: policies},
		Commit:     writeback.Commit{AuthorName: r.authorName, AuthorEmail: r.authorEmail, MessageTemplate: tmpl, Values: values},
	}
	if p.Target, err = r.target(); err != nil {
		return writeback.Plan{}, err
	}
	if err := p.Validate(); err != nil {
		return writeback.Plan{}, usageError{err}
	}
	return p, nil
}

// target is where the commit goes: as the API's push spec says
// (writeback.PushTarget), or a pull request.
func (r *remoteFlags) target() (writeback.Target, error) {
	pr, err := r.pr.spec()
	if err != nil {
		return writeback.Target{}, err
	}
	if pr != nil {
		if r.pushBranch != "" || r.pushRefspec != "" {
			return writeback.Target{}, usageError{fmt.Errorf("%s pushes to a head branch of its own: not with --push-branch or --push-refspec", r.pr.askedBy())}
		}
		if pr.SecretRef != nil {
			return writeback.Target{}, usageError{errors.New("--pr-secret names a Kubernetes Secret; with --repository give --forge-token-env")}
		}
		base := pr.Base
		if base == "" {
			base = r.branch
		}
		t := writeback.Target{PullRequest: &writeback.PullRequest{
			Provider: string(pr.Provider), APIURL: pr.APIURL, Base: base, HeadTemplate: pr.BranchTemplate,
			TitleTemplate: pr.TitleTemplate, BodyTemplate: pr.BodyTemplate, Draft: pr.Draft,
			Labels: pr.Labels, Reviewers: pr.Reviewers, Assignees: pr.Assignees, AutoMerge: string(pr.AutoMerge),
		}}
		if pr.BranchTemplate == "" {
			// One request per base: a run again updates it.
			t.PullRequest.Head = "image-toolkit/" + base
		}
		return t, nil
	}
	var dst *writeback.RefUpdate
	if r.pushRefspec != "" {
		d, err := writeback.ParseRefspec(r.pushRefspec, r.branch)
		if err != nil {
			return writeback.Target{}, usageError{fmt.Errorf("--push-refspec %q: %w", r.pushRefspec, err)}
		}
		dst = &d
	}
	return writeback.PushTarget(r.branch, r.pushBranch, dst), nil
}

// auth reads the credentials the flags name, with the checks of a
// repository Secret (pkg/git's): an ssh URL needs a key and known_hosts.
func (r *remoteFlags) auth() (*git.Auth, error) {
	data := map[string][]byte{}
	for key, env := range map[string]string{"username": r.usernameEnv, "password": r.passwordEnv, "bearerToken": r.bearerTokenEnv} {
		if env == "" {
			continue
		}
		v, ok := os.LookupEnv(env)
		if !ok {
			return nil, usageError{fmt.Errorf("environment variable %s (for the git %s) is not set", env, key)}
		}
		data[key] = []byte(v)
	}
	if r.caFile != "" {
		if err := readInto(data, "ca.crt", r.caFile, "--git-ca-file"); err != nil {
			return nil, err
		}
	}
	if ep, err := git.ParseEndpoint(r.repository); err == nil && ep.Scheme == "ssh" {
		if r.sshKey != "" {
			if err := readInto(data, "identity", r.sshKey, "--ssh-key"); err != nil {
				return nil, err
			}
		}
		if r.sshPassphraseEnv != "" {
			data["password"] = []byte(os.Getenv(r.sshPassphraseEnv))
		}
		hosts := r.knownHosts
		if hosts == "" {
			home, _ := os.UserHomeDir()
			hosts = filepath.Join(home, ".ssh", "known_hosts")
		}
		if err := readInto(data, "known_hosts", hosts, "--known-hosts"); err != nil {
			return nil, err
		}
	}
	auth, err := git.AuthFromSecrets(r.repository, data, nil)
	if err != nil {
		return nil, usageError{err}
	}
	return auth, nil
}

// signingData is the signing key the flags name, in the keys of a signing
// Secret; nil when the commit is not signed.
func (r *remoteFlags) signingData() (map[string][]byte, error) {
	if r.signingKey == "" {
		return nil, nil
	}
	if err := oneOf("--signing-key-type", r.signingKeyType, signingKeyTypes); err != nil {
		return nil, err
	}
	key, pass := "git.asc", "passphrase"
	if r.signingKeyType == "ssh" {
		key, pass = "identity", "password"
	}
	data := map[string][]byte{}
	if err := readInto(data, key, r.signingKey, "--signing-key"); err != nil {
		return nil, err
	}
	// The key's own first line says its kind: name the flag that is off,
	// not the Secret key the engine would otherwise blame.
	isSSH := bytes.Contains(data[key], []byte("-----BEGIN OPENSSH PRIVATE KEY-----"))
	isPGP := bytes.Contains(data[key], []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----"))
	switch {
	case isSSH && r.signingKeyType != "ssh":
		return nil, usageError{fmt.Errorf("--signing-key %s is an SSH private key: add --signing-key-type ssh (the default, gpg, wants an armored OpenPGP key)", r.signingKey)}
	case isPGP && r.signingKeyType == "ssh":
		return nil, usageError{fmt.Errorf("--signing-key %s is an OpenPGP key: drop --signing-key-type ssh, or give an SSH private key", r.signingKey)}
	case !isSSH && !isPGP:
		return nil, usageError{fmt.Errorf("--signing-key %s is neither an armored OpenPGP private key (gpg --armor --export-secret-keys) nor an OpenSSH private key", r.signingKey)}
	}
	if r.signingPassphraseEnv != "" {
		data[pass] = []byte(os.Getenv(r.signingPassphraseEnv))
	}
	return data, nil
}

func readInto(data map[string][]byte, key, file, flag string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", flag, err)}
	}
	data[key] = b
	return nil
}
