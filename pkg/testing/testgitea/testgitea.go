//go:build unix

// Package testgitea runs a real Gitea (bin/gitea/gitea, built by `make
// testenv` or `hack/tools.sh gitea`) on loopback for tests, with an admin
// user, an API token of every scope, and helpers to make repositories,
// branches, users and labels and to read pull requests back.
//
// The pull-request tests need a forge, not a recording of one: what Gitea
// does with a draft's title prefix, an auto-merge without checks, a review
// request or a bad token is only known by asking it, and a hand-written
// fake would answer what its author believed. Gitea is a single binary with
// SQLite, so a fresh instance per test binary costs about a second.
//
// The server keeps everything in a temporary work path (configuration,
// database, repositories, logs, and the HOME its git runs with), which Stop
// removes; nothing in the real home or the repository is touched.
package testgitea

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Timeouts of the harness. Gitea answers in milliseconds on loopback; the
// bounds are there so that a wedged server fails a test instead of hanging
// it until go test's own timeout.
const (
	// StartTimeout bounds Start when ctx has no earlier deadline.
	StartTimeout = 60 * time.Second
	// RequestTimeout bounds each API call.
	RequestTimeout = 30 * time.Second
	// GitTimeout bounds each git command.
	GitTimeout = 60 * time.Second
	// stopTimeout is how long Stop waits for a graceful exit before it
	// kills the process group.
	stopTimeout = 10 * time.Second
)

// AdminUser is the name of the administrator Start creates. "admin" itself
// is one of Gitea's reserved names.
const AdminUser = "tk-admin"

// Server is a running Gitea.
type Server struct {
	// URL is the server's root, http://127.0.0.1:PORT/, which is also its
	// ROOT_URL, so the URLs Gitea puts in its answers use it.
	URL string
	// Admin and Password are the administrator's credentials.
	Admin, Password string
	// Token is an API token of the administrator with every scope.
	Token string
	// WorkPath is the instance's work directory (removed by Stop).
	WorkPath string

	bin     string // the directory holding gitea/gitea
	env     []string
	http    *http.Client
	cmd     *exec.Cmd
	done    chan struct{} // closed when the web process has exited
	waitErr error         // set before done is closed

	stopOnce sync.Once
	stopErr  error
}

// BinDir is where the gitea binary is looked for when Start is given no
// directory: $IMAGE_TOOLKIT_BIN when set, else bin/ under the workspace
// root (the directory holding go.work above the working directory).
func BinDir() (string, error) {
	if d := os.Getenv("IMAGE_TOOLKIT_BIN"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return filepath.Join(dir, "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.work not found above the working directory, and IMAGE_TOOLKIT_BIN is not set")
		}
		dir = parent
	}
}

// ErrNoBinary is returned (wrapped) by Start when the gitea binary is not
// built, so that tests can skip rather than fail.
var ErrNoBinary = errors.New("gitea binary not found: run `make testenv` or `hack/tools.sh gitea`")

// Binary is the path of the gitea binary under bin ("" means BinDir), or
// an error wrapping ErrNoBinary when it is missing.
func Binary(bin string) (string, error) {
	if bin == "" {
		var err error
		if bin, err = BinDir(); err != nil {
			return "", fmt.Errorf("%w (%v)", ErrNoBinary, err)
		}
	}
	p := filepath.Join(bin, "gitea", "gitea")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s", ErrNoBinary, p)
	}
	return p, nil
}

// Start runs a fresh Gitea with its work path in a new temporary directory
// under dir ("" means the system's), from the gitea/ directory under bin
// ("" means BinDir). It returns once the API answers, with an admin user
// and a token made. The caller must call Stop.
func Start(ctx context.Context, dir, bin string) (*Server, error) {
	giteaBin, err := Binary(bin)
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil, errors.New("git not found in PATH: Gitea and the helpers run it")
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()

	work, err := os.MkdirTemp(dir, "gitea-")
	if err != nil {
		return nil, err
	}
	s := &Server{
		Admin:    AdminUser,
		Password: "pw-" + randomHex(12),
		WorkPath: work,
		bin:      filepath.Dir(giteaBin),
		http:     &http.Client{Timeout: RequestTimeout},
	}
	if err := s.start(ctx, giteaBin); err != nil {
		s.kill()
		_ = os.RemoveAll(work)
		return nil, err
	}
	return s, nil
}

func (s *Server) start(ctx context.Context, giteaBin string) error {
	for _, d := range []string{"custom/conf", "data", "log", "repos", "home", "tmp"} {
		if err := os.MkdirAll(filepath.Join(s.WorkPath, d), 0o700); err != nil {
			return err
		}
	}
	// Gitea reads its locales and page templates from the work path;
	// without them it exits with "translation is missing".
	for _, d := range []string{"options", "templates"} {
		if err := os.Symlink(filepath.Join(s.bin, d), filepath.Join(s.WorkPath, d)); err != nil {
			return err
		}
	}
	s.env = s.childEnv()
	secrets := iniSecrets{secretKey: randomHex(32), internalToken: randomHex(32)}

	// The port is chosen before Gitea binds it, so another process can
	// take it in between; a start that fails on the port is tried again
	// on another. Migration and the admin user do not depend on the port.
	port, err := freePort()
	if err != nil {
		return err
	}
	if err := s.writeConfig(port, secrets); err != nil {
		return err
	}
	if out, err := s.run(ctx, giteaBin, "migrate"); err != nil {
		return fmt.Errorf("gitea migrate: %v\n%s%s", err, out, s.logTail())
	}
	if out, err := s.run(ctx, giteaBin, "admin", "user", "create", "--admin",
		"--username", s.Admin, "--password", s.Password, "--email", s.Admin+"@example.com",
		"--must-change-password=false"); err != nil {
		return fmt.Errorf("gitea admin user create: %v\n%s%s", err, out, s.logTail())
	}
	const attempts = 3
	for try := 1; ; try++ {
		err := s.startWeb(ctx, giteaBin)
		if err == nil {
			break
		}
		if try >= attempts || !errors.Is(err, errPortTaken) || ctx.Err() != nil {
			return err
		}
		if port, err = freePort(); err != nil {
			return err
		}
		if err := s.writeConfig(port, secrets); err != nil {
			return err
		}
	}
	return s.createToken(ctx)
}

// childEnv is the environment of Gitea and of the git commands: PATH from
// the test, everything else pointing into the work path, so that neither
// reads nor writes the real home's configuration.
func (s *Server) childEnv() []string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	home := filepath.Join(s.WorkPath, "home")
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"USER=" + name,
		"GITEA_WORK_DIR=" + s.WorkPath,
		"GITEA_CUSTOM=" + filepath.Join(s.WorkPath, "custom"),
		"TMPDIR=" + filepath.Join(s.WorkPath, "tmp"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_TERMINAL_PROMPT=0",
		"LANG=C",
	}
}

type iniSecrets struct{ secretKey, internalToken string }

func (s *Server) configPath() string { return filepath.Join(s.WorkPath, "custom", "conf", "app.ini") }

// writeConfig writes app.ini for port. Secrets are given, not left to
// Gitea, which would otherwise generate them and rewrite the file.
// Everything a test does not use is off, for a fast and quiet start:
// SSH, mail, cron, Actions, packages, LFS, OAuth2, the indexers' files.
func (s *Server) writeConfig(port int, sec iniSecrets) error {
	w := s.WorkPath
	s.URL = fmt.Sprintf("http://127.0.0.1:%d/", port)
	ini := fmt.Sprintf(`APP_NAME = image-toolkit test forge
RUN_MODE = prod
WORK_PATH = %[1]s
; Tests run as root in containers; Gitea refuses root without this.
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = %[2]d
ROOT_URL = %[3]s
DOMAIN = 127.0.0.1
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
APP_DATA_PATH = %[1]s/data

[database]
DB_TYPE = sqlite3
PATH = %[1]s/data/gitea.db

[security]
INSTALL_LOCK = true
SECRET_KEY = %[4]s
INTERNAL_TOKEN = %[5]s

[oauth2]
ENABLED = false

[service]
DISABLE_REGISTRATION = true
REQUIRE_SIGNIN_VIEW = false
ENABLE_NOTIFY_MAIL = false

[repository]
ROOT = %[1]s/repos
DEFAULT_BRANCH = main

[log]
MODE = file
LEVEL = Warn
ROOT_PATH = %[1]s/log

[mailer]
ENABLED = false

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false

[actions]
ENABLED = false

[packages]
ENABLED = false

[queue]
TYPE = channel

[session]
PROVIDER = memory

[cache]
ADAPTER = memory

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[picture]
DISABLE_GRAVATAR = true

[api]
ENABLE_SWAGGER = false

[webhook]
; Gitea refuses to deliver to loopback by default; the receivers under
; test listen there. TLS stays verified.
ALLOWED_HOST_LIST = loopback
DELIVER_TIMEOUT = 10
`, w, port, s.URL, sec.secretKey, sec.internalToken)
	return os.WriteFile(s.configPath(), []byte(ini), 0o600)
}

// run runs a one-shot gitea command on the instance's configuration.
func (s *Server) run(ctx context.Context, giteaBin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, giteaBin, append(args, "--config", s.configPath())...)
	cmd.Dir = s.WorkPath
	cmd.Env = s.env
	cmd.SysProcAttr = sysProcAttr()
	return cmd.CombinedOutput()
}

var errPortTaken = errors.New("port taken")

// startWeb starts `gitea web` in its own process group (so that Stop
// reaches whatever it runs) and waits until its API answers.
func (s *Server) startWeb(ctx context.Context, giteaBin string) error {
	out, err := os.OpenFile(filepath.Join(s.WorkPath, "log", "web.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close() // the child holds its own descriptor
	// Not CommandContext: the server outlives Start's ctx; Stop ends it.
	cmd := exec.Command(giteaBin, "web", "--config", s.configPath())
	cmd.Dir = s.WorkPath
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting gitea web: %w", err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	go func() {
		s.waitErr = cmd.Wait()
		close(done)
	}()

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.ping(ctx) == nil {
			return nil
		}
		select {
		case <-done:
			tail := s.logTail()
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("%w: gitea web exited: %v%s", errPortTaken, s.waitErr, tail)
			}
			return fmt.Errorf("gitea web exited before its API answered: %v%s", s.waitErr, tail)
		case <-ctx.Done():
			return fmt.Errorf("gitea's API did not answer at %sapi/v1/version: %w%s", s.URL, ctx.Err(), s.logTail())
		case <-tick.C:
		}
	}
}

// ping asks for the server's version, which needs no authentication.
func (s *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var v struct {
		Version string `json:"version"`
	}
	if err := s.do(ctx, http.MethodGet, "version", nil, &v, nil); err != nil {
		return err
	}
	if v.Version == "" {
		return errors.New("no version in the answer")
	}
	return nil
}

// createToken makes the admin's API token. Gitea only takes a password
// (basic authentication) for this call.
func (s *Server) createToken(ctx context.Context) error {
	var tok struct {
		SHA1 string `json:"sha1"`
	}
	body := map[string]any{"name": "testgitea", "scopes": []string{"all"}}
	basic := func(r *http.Request) { r.SetBasicAuth(s.Admin, s.Password) }
	if err := s.do(ctx, http.MethodPost, "users/"+url.PathEscape(s.Admin)+"/tokens", body, &tok, basic); err != nil {
		return fmt.Errorf("creating the admin's token: %w%s", err, s.logTail())
	}
	if tok.SHA1 == "" {
		return errors.New("creating the admin's token: Gitea answered no token")
	}
	s.Token = tok.SHA1
	return nil
}

// Stop ends the server (SIGTERM to its process group, SIGKILL after a
// grace period), waits for it, and removes its work path. It may be called
// more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.kill()
		s.stopErr = os.RemoveAll(s.WorkPath)
	})
	return s.stopErr
}

func (s *Server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		// The leader is still alive, so the group is still Gitea's.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-s.done
	}
}

// LogTail is the end of Gitea's log and console output, for a test's
// failure message.
func (s *Server) LogTail() string { return s.logTail() }

func (s *Server) logTail() string {
	var b strings.Builder
	for _, name := range []string{"web.out", "gitea.log"} {
		data, err := os.ReadFile(filepath.Join(s.WorkPath, "log", name))
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(&b, "\n--- end of gitea's %s ---\n%s", name, strings.Join(lines, "\n"))
	}
	return b.String()
}

// APIError is a non-2xx answer of the API.
type APIError struct {
	Method, Path string
	StatusCode   int
	// Message is Gitea's "message", or the body when it has none.
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Do calls the API as the admin, with the token: path is under /api/v1/
// (e.g. "repos/tk-admin/fleet/pulls"), body (when not nil) is sent as
// JSON, and the answer is decoded into out (when not nil). A non-2xx
// answer is an *APIError.
func (s *Server) Do(ctx context.Context, method, path string, body, out any) error {
	return s.do(ctx, method, path, body, out, func(r *http.Request) {
		r.Header.Set("Authorization", "token "+s.Token)
	})
}

func (s *Server) do(ctx context.Context, method, path string, body, out any, auth func(*http.Request)) error {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	u := s.URL + "api/v1/" + strings.TrimPrefix(path, "/")
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != nil {
		auth(req)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Method: method, Path: path, StatusCode: resp.StatusCode, Message: strings.TrimSpace(string(data))}
		var m struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &m) == nil && m.Message != "" {
			e.Message = m.Message
		}
		return e
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// FullName is repo as owner/name: a bare name is the admin's.
func (s *Server) FullName(repo string) string {
	if strings.Contains(repo, "/") {
		return repo
	}
	return s.Admin + "/" + repo
}

func (s *Server) repoPath(repo string) string {
	owner, name, _ := strings.Cut(s.FullName(repo), "/")
	return "repos/" + url.PathEscape(owner) + "/" + url.PathEscape(name)
}

// CreateRepo creates a public repository named name (the admin's, or an
// organization's when name is org/name), whose main branch has one commit
// holding files (path → content), and returns its clone URL. The commit is
// pushed with git over HTTP, as a user would.
func (s *Server) CreateRepo(ctx context.Context, name string, files map[string]string) (cloneURL string, err error) {
	var repo struct {
		CloneURL string `json:"clone_url"`
	}
	endpoint := "user/repos"
	short := name
	if org, n, ok := strings.Cut(name, "/"); ok {
		endpoint, short = "orgs/"+url.PathEscape(org)+"/repos", n
	}
	body := map[string]any{"name": short, "auto_init": false, "default_branch": "main", "private": false}
	if err := s.Do(ctx, http.MethodPost, endpoint, body, &repo); err != nil {
		return "", fmt.Errorf("creating repository %s: %w", name, err)
	}
	if _, err := s.commit(ctx, repo.CloneURL, "", "main", files, "Initial commit"); err != nil {
		return "", fmt.Errorf("pushing the first commit of %s: %w", name, err)
	}
	// Gitea marks the repository non-empty after the push, in the
	// background; until then its pull request API answers 404.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var state struct {
			Empty bool `json:"empty"`
		}
		if err := s.Do(ctx, http.MethodGet, s.repoPath(name), nil, &state); err != nil {
			return "", err
		}
		if !state.Empty {
			return repo.CloneURL, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("repository %s is still empty after its first push: %w", name, ctx.Err())
		case <-tick.C:
		}
	}
}

// CloneURL is the HTTP clone URL of repo (owner/name, or the admin's name).
func (s *Server) CloneURL(repo string) string { return s.URL + s.FullName(repo) + ".git" }

// PushBranch commits files (path → content) on top of branch from and
// pushes the commit as branch (forced, as an update job does), returning
// the commit's SHA.
func (s *Server) PushBranch(ctx context.Context, repo, branch, from string, files map[string]string, message string) (string, error) {
	sha, err := s.commit(ctx, s.CloneURL(repo), from, branch, files, message)
	if err != nil {
		return "", fmt.Errorf("pushing branch %s of %s: %w", branch, s.FullName(repo), err)
	}
	return sha, nil
}

// commit makes a commit of files on from (or a first commit when from is
// "") in a scratch clone and pushes it to branch.
func (s *Server) commit(ctx context.Context, cloneURL, from, branch string, files map[string]string, message string) (string, error) {
	dir, err := os.MkdirTemp(filepath.Join(s.WorkPath, "tmp"), "clone-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	if from == "" {
		if _, err := s.Git(ctx, dir, "init", "-q", "-b", branch); err != nil {
			return "", err
		}
	} else if _, err := s.Git(ctx, dir, "clone", "-q", "--depth", "1", "--branch", from, cloneURL, "."); err != nil {
		return "", err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(files[name]), 0o644); err != nil {
			return "", err
		}
	}
	for _, args := range [][]string{
		{"add", "-A"},
		{"commit", "-q", "--allow-empty", "-m", message},
		{"push", "-q", "--force", cloneURL, "HEAD:refs/heads/" + branch},
	} {
		if _, err := s.Git(ctx, dir, args...); err != nil {
			return "", err
		}
	}
	out, err := s.Git(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// Git runs git in dir as the admin: with the server's clean environment,
// a fixed author, and the admin's credentials sent as a header to this
// server only, so that they appear in no URL or configuration file. It
// returns git's output, and an error quoting it on failure.
func (s *Server) Git(ctx context.Context, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, GitTimeout)
	defer cancel()
	auth := base64.StdEncoding.EncodeToString([]byte(s.Admin + ":" + s.Password))
	full := append([]string{"-c", "http." + s.URL + ".extraHeader=Authorization: Basic " + auth}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Dir = dir
	cmd.Env = append(append([]string{}, s.env...),
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// CreateUser creates a user (not an admin) through the admin API and
// returns its password.
func (s *Server) CreateUser(ctx context.Context, name string) (password string, err error) {
	password = "pw-" + randomHex(12)
	body := map[string]any{
		"username": name, "email": name + "@example.com", "password": password,
		"must_change_password": false, "send_notify": false,
	}
	if err := s.Do(ctx, http.MethodPost, "admin/users", body, nil); err != nil {
		return "", fmt.Errorf("creating user %s: %w", name, err)
	}
	return password, nil
}

// CreateOrg creates an organization owned by the admin.
func (s *Server) CreateOrg(ctx context.Context, name string) error {
	if err := s.Do(ctx, http.MethodPost, "orgs", map[string]any{"username": name, "visibility": "public"}, nil); err != nil {
		return fmt.Errorf("creating organization %s: %w", name, err)
	}
	return nil
}

// AddCollaborator gives user a permission (read, write, admin) on repo:
// Gitea assigns requests and asks reviews only of users with access.
func (s *Server) AddCollaborator(ctx context.Context, repo, user, permission string) error {
	body := map[string]any{"permission": permission}
	if err := s.Do(ctx, http.MethodPut, s.repoPath(repo)+"/collaborators/"+url.PathEscape(user), body, nil); err != nil {
		return fmt.Errorf("adding %s to %s: %w", user, s.FullName(repo), err)
	}
	return nil
}

// CreateLabel creates a label of repo and returns its ID. color is
// Gitea's hex form, e.g. "#00aabb".
func (s *Server) CreateLabel(ctx context.Context, repo, name, color string) (int64, error) {
	var l Label
	body := map[string]any{"name": name, "color": color}
	if err := s.Do(ctx, http.MethodPost, s.repoPath(repo)+"/labels", body, &l); err != nil {
		return 0, fmt.Errorf("creating label %s of %s: %w", name, s.FullName(repo), err)
	}
	return l.ID, nil
}

// CreateHook adds a webhook of Gitea's own type to repo, signed with
// secret, calling url on pushes to any branch, and returns its ID.
func (s *Server) CreateHook(ctx context.Context, repo, url, secret string) (int64, error) {
	var h struct {
		ID int64 `json:"id"`
	}
	body := map[string]any{
		"type":          "gitea",
		"active":        true,
		"events":        []string{"push"},
		"branch_filter": "*",
		"config":        map[string]string{"url": url, "content_type": "json", "secret": secret},
	}
	if err := s.Do(ctx, http.MethodPost, s.repoPath(repo)+"/hooks", body, &h); err != nil {
		return 0, fmt.Errorf("creating a webhook of %s: %w", s.FullName(repo), err)
	}
	return h.ID, nil
}

// Label is a label as the API shows it.
type Label struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// User is a user as the API shows it.
type User struct {
	Login string `json:"login"`
}

// Branch is one side of a pull request.
type Branch struct {
	Ref string `json:"ref"`
	SHA string `json:"sha"`
}

// Pull is what the tests read of a pull request.
type Pull struct {
	Number             int     `json:"number"`
	Title              string  `json:"title"`
	Body               string  `json:"body"`
	State              string  `json:"state"`
	Draft              bool    `json:"draft"`
	Merged             bool    `json:"merged"`
	Mergeable          bool    `json:"mergeable"`
	HTMLURL            string  `json:"html_url"`
	Head               Branch  `json:"head"`
	Base               Branch  `json:"base"`
	Labels             []Label `json:"labels"`
	Assignees          []User  `json:"assignees"`
	RequestedReviewers []User  `json:"requested_reviewers"`
	MergeCommitSHA     string  `json:"merge_commit_sha"`
	User               User    `json:"user"`
	Comments           int     `json:"comments"`
}

// Comment is a comment of an issue or pull request.
type Comment struct {
	ID   int64  `json:"id"`
	Body string `json:"body"`
	User User   `json:"user"`
}

// ListPulls lists the pull requests of repo in state (open, closed, all),
// every page.
func (s *Server) ListPulls(ctx context.Context, repo, state string) ([]Pull, error) {
	var all []Pull
	for page := 1; ; page++ {
		var prs []Pull
		q := url.Values{"state": {state}, "page": {strconv.Itoa(page)}, "limit": {"50"}}
		if err := s.Do(ctx, http.MethodGet, s.repoPath(repo)+"/pulls?"+q.Encode(), nil, &prs); err != nil {
			return nil, err
		}
		all = append(all, prs...)
		if len(prs) < 50 {
			return all, nil
		}
	}
}

// GetPull reads pull request number of repo.
func (s *Server) GetPull(ctx context.Context, repo string, number int) (*Pull, error) {
	var pr Pull
	if err := s.Do(ctx, http.MethodGet, fmt.Sprintf("%s/pulls/%d", s.repoPath(repo), number), nil, &pr); err != nil {
		return nil, err
	}
	return &pr, nil
}

// MergePull merges pull request number of repo with style
// (merge, squash, rebase).
//
// Gitea checks a request's mergeability in the background after each
// push to it, and refuses a merge meanwhile (405 "Please try again
// later"): that answer is retried until ctx ends, as a person would.
func (s *Server) MergePull(ctx context.Context, repo string, number int, style string) error {
	for {
		err := s.Do(ctx, http.MethodPost, fmt.Sprintf("%s/pulls/%d/merge", s.repoPath(repo), number),
			map[string]any{"Do": style}, nil)
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(apiErr.Message, "try again later") {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (still, when %w)", err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Comments lists the comments of issue or pull request number of repo.
func (s *Server) Comments(ctx context.Context, repo string, number int) ([]Comment, error) {
	var cs []Comment
	if err := s.Do(ctx, http.MethodGet, fmt.Sprintf("%s/issues/%d/comments", s.repoPath(repo), number), nil, &cs); err != nil {
		return nil, err
	}
	return cs, nil
}

// WaitPull polls pull request number until cond holds of it or ctx ends;
// Gitea does some work (mergeability, auto-merge) in the background.
func (s *Server) WaitPull(ctx context.Context, repo string, number int, cond func(*Pull) bool) (*Pull, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		pr, err := s.GetPull(ctx, repo, number)
		if err != nil {
			return nil, err
		}
		if cond(pr) {
			return pr, nil
		}
		select {
		case <-ctx.Done():
			return pr, fmt.Errorf("pull request %d of %s: waiting: %w", number, s.FullName(repo), ctx.Err())
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	addr, ok := l.Addr().(*net.TCPAddr)
	if err := l.Close(); err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("listener address %v is not TCP", l.Addr())
	}
	return addr.Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported systems
	return hex.EncodeToString(b)
}
