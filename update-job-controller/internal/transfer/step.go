package transfer

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Environment of the steps, set in the Pod spec by the controller.
const (
	EnvURL       = "TRANSFER_URL"
	EnvCA        = "TRANSFER_CA"
	EnvTokenFile = "TRANSFER_TOKEN_FILE"
	EnvWorkspace = "WORKSPACE"
	EnvPath      = "UPDATE_PATH"
	EnvMaxBytes  = "TRANSFER_MAX_BYTES"
)

// StepConfig is what a step needs, read from its environment.
type StepConfig struct {
	// URL is the server's base URL, https://HOST:PORT.
	URL string
	// CA is the server's certificate (PEM), the only one trusted.
	CA []byte
	// TokenFile holds the projected token; read at each request, since
	// the kubelet rotates it.
	TokenFile string
	// Dir is the directory exchanged: the workspace's update path.
	Dir      string
	MaxBytes int64
}

// StepConfigFromEnv reads a StepConfig from getenv.
func StepConfigFromEnv(getenv func(string) string) (*StepConfig, error) {
	c := &StepConfig{URL: getenv(EnvURL), CA: []byte(getenv(EnvCA)), TokenFile: getenv(EnvTokenFile)}
	for _, v := range []struct{ name, value string }{{EnvURL, c.URL}, {EnvCA, string(c.CA)}, {EnvTokenFile, c.TokenFile}, {EnvWorkspace, getenv(EnvWorkspace)}} {
		if v.value == "" {
			return nil, fmt.Errorf("%s is not set: the step runs in a Pod the update-job-controller made", v.name)
		}
	}
	if !strings.HasPrefix(c.URL, "https://") {
		return nil, fmt.Errorf("%s %q: want https://HOST:PORT", EnvURL, c.URL)
	}
	c.Dir = filepath.Join(getenv(EnvWorkspace), filepath.FromSlash(getenv(EnvPath)))
	if v := getenv(EnvMaxBytes); v != "" {
		if _, err := fmt.Sscan(v, &c.MaxBytes); err != nil {
			return nil, fmt.Errorf("%s %q: %w", EnvMaxBytes, v, err)
		}
	}
	return c, nil
}

func (c *StepConfig) client() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CA) {
		return nil, fmt.Errorf("%s holds no PEM certificate", EnvCA)
	}
	tr := &http.Transport{
		TLSClientConfig:       &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
		// The controller's Pod IP is dialled directly: a proxy from the
		// environment must not see the exchange.
		Proxy: nil,
	}
	return &http.Client{Transport: tr}, nil
}

func (c *StepConfig) request(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	token, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("reading the token: %w", err)
	}
	hc, err := c.client()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.URL, "/")+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

// Fetch downloads the checkout into c.Dir.
func Fetch(ctx context.Context, c *StepConfig) error {
	resp, err := c.request(ctx, http.MethodGet, CheckoutPath, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := Extract(resp.Body, c.Dir, c.MaxBytes); err != nil {
		return fmt.Errorf("extracting the checkout: %w", err)
	}
	return nil
}

// Upload sends the tree under c.Dir back.
func Upload(ctx context.Context, c *StepConfig) error {
	if fi, err := os.Stat(c.Dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory: the update path must stay one", c.Dir)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(WriteTar(pw, c.Dir)) }()
	resp, err := c.request(ctx, http.MethodPut, ResultPath, pr)
	pr.CloseWithError(errors.New("upload ended"))
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// RunStep runs the step named by args[0] (fetch or upload), writing what
// went wrong to stderr; it returns the exit code.
func RunStep(args []string, stderr io.Writer) int {
	if len(args) != 1 || (args[0] != "fetch" && args[0] != "upload") {
		fmt.Fprintln(stderr, "usage: update-job-controller step fetch|upload (in a container-mode job's Pod)")
		return 2
	}
	c, err := StepConfigFromEnv(os.Getenv)
	if err == nil {
		// The Pod's activeDeadlineSeconds bounds the whole run; this
		// bounds a step that hangs on a controller that went away.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		if args[0] == "fetch" {
			err = Fetch(ctx, c)
		} else {
			err = Upload(ctx, c)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "step %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
