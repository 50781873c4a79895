// Package transfer moves a container-mode job's files between the
// update-job-controller and the job's Pod, so that the git side of every job
// (fetch into the mirror cache, checkout, commit, signing, push and the
// non-fast-forward retries) stays in one place, the runner, and no git
// credential ever enters the Pod.
//
// The controller serves HTTPS on its own address (the Pod IP in a cluster:
// no Service and no cluster DNS are needed, and each replica serves the
// jobs it claimed). Its certificate is self-signed at start and handed to
// the Pod in its spec, which is public; the Pod's fetch and upload steps
// verify the server against it. The steps authenticate with a projected
// ServiceAccount token of audience Audience, bound to their Pod and mounted
// only into them; the server checks it with a TokenReview and accepts it
// only for the session of that Pod's UID. So a token cannot be replayed
// from another Pod, the user's container never holds one, and a session
// ends when its attempt does.
//
// The wire format is a plain tar stream each way, capped in size, and
// extracted defensively (see Extract): the controller treats what a user's
// container left as hostile input.
package transfer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Audience of the steps' tokens: a token for the API server (or any other
// audience) is refused, and ours is refused by the API server.
const Audience = "update.image.toolkit.dev"

// Endpoints of the server.
const (
	CheckoutPath = "/v1/checkout"
	ResultPath   = "/v1/result"
)

// podUIDExtra is the key of a bound token's Pod UID in a TokenReview's
// user extra.
const podUIDExtra = "authentication.kubernetes.io/pod-uid"

// Identity is who a token was issued to.
type Identity struct {
	Username string
	PodUID   types.UID
}

// Authenticator turns a bearer token into an identity.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (*Identity, error)
}

// TokenReviewer authenticates with the API server's TokenReview, for
// Audience, and requires a token bound to a Pod.
type TokenReviewer struct {
	Client client.Client
}

// Authenticate implements Authenticator.
func (t TokenReviewer) Authenticate(ctx context.Context, token string) (*Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr := &authnv1.TokenReview{
		ObjectMeta: metav1.ObjectMeta{},
		Spec:       authnv1.TokenReviewSpec{Token: token, Audiences: []string{Audience}},
	}
	if err := t.Client.Create(ctx, tr); err != nil {
		return nil, fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		return nil, fmt.Errorf("token not authenticated: %s", st.Error)
	}
	if !slices.Contains(st.Audiences, Audience) {
		return nil, fmt.Errorf("token is not for audience %s", Audience)
	}
	uids := st.User.Extra[podUIDExtra]
	if len(uids) != 1 || uids[0] == "" {
		return nil, errors.New("token is not bound to a pod")
	}
	return &Identity{Username: st.User.Username, PodUID: types.UID(uids[0])}, nil
}

// Session is one Pod's exchange: the checkout it fetches and the directory
// its upload is extracted into, once.
type Session struct {
	pod      types.UID
	checkout string
	result   string
	done     chan struct{}
	mu       sync.Mutex
	started  bool
	err      error
}

// Done is closed once the upload has been received (or refused).
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the upload was refused, after Done.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Server serves the sessions of running Pods.
type Server struct {
	auth     Authenticator
	maxBytes int64
	cert     tls.Certificate
	certPEM  []byte
	mu       sync.Mutex
	sessions map[types.UID]*Session
	// log reports refused requests; nil discards.
	log func(msg string, keysAndValues ...any)
}

// NewServer makes a server with a fresh key and a certificate valid for
// host (an IP address or a DNS name, as the steps dial it).
func NewServer(auth Authenticator, host string, maxBytes int64, log func(string, ...any)) (*Server, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "update-job-controller transfer"},
		NotBefore:    time.Now().Add(-time.Hour),
		// The key lives as long as the process; a year outlasts it.
		NotAfter:    time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = func(string, ...any) {}
	}
	return &Server{
		auth:     auth,
		maxBytes: maxBytes,
		cert:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		certPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		sessions: map[types.UID]*Session{},
		log:      log,
	}, nil
}

// CertPEM is the server's certificate, for the steps to trust.
func (s *Server) CertPEM() []byte { return s.certPEM }

// Open starts the session of the Pod pod: it may fetch checkout and
// upload into result once. Close it when the attempt ends.
func (s *Server) Open(pod types.UID, checkout, result string) *Session {
	sess := &Session{pod: pod, checkout: checkout, result: result, done: make(chan struct{})}
	s.mu.Lock()
	s.sessions[pod] = sess
	s.mu.Unlock()
	return sess
}

// Close ends a session: its Pod's requests are refused from now on.
func (s *Server) Close(sess *Session) {
	s.mu.Lock()
	if s.sessions[sess.pod] == sess {
		delete(s.sessions, sess.pod)
	}
	s.mu.Unlock()
}

// Serve serves on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{s.cert}, MinVersion: tls.VersionTLS13},
		ReadHeaderTimeout: 10 * time.Second,
		// A checkout or result of the size cap moves in far less.
		ReadTimeout:  10 * time.Minute,
		WriteTimeout: 10 * time.Minute,
		IdleTimeout:  time.Minute,
		// A refused handshake (a client trusting another certificate)
		// is the client's problem, told to it; keep it out of stderr.
		ErrorLog: log.New(logWriter(s.log), "", 0),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.ServeTLS(l, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeHTTP authenticates the request and serves its Pod's session.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		http.Error(w, "a bearer token is required", http.StatusUnauthorized)
		return
	}
	id, err := s.auth.Authenticate(req.Context(), token)
	if err != nil {
		s.log("transfer request refused", "remote", req.RemoteAddr, "reason", err.Error())
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	sess := s.sessions[id.PodUID]
	s.mu.Unlock()
	if sess == nil {
		// The Pod of an attempt that ended, or of no attempt.
		s.log("transfer request for no session", "remote", req.RemoteAddr, "user", id.Username, "pod", id.PodUID)
		http.Error(w, "this pod has no transfer session", http.StatusForbidden)
		return
	}
	switch {
	case req.URL.Path == CheckoutPath && req.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/x-tar")
		if err := WriteTar(w, sess.checkout); err != nil {
			// The status line is gone: breaking the stream is the only
			// way left to tell the step, whose tar reader then fails.
			s.log("sending the checkout failed", "pod", id.PodUID, "error", err.Error())
			panic(http.ErrAbortHandler)
		}
	case req.URL.Path == ResultPath && req.Method == http.MethodPut:
		sess.mu.Lock()
		started := sess.started
		sess.started = true
		sess.mu.Unlock()
		if started {
			http.Error(w, "the result was already uploaded", http.StatusConflict)
			return
		}
		err := Extract(http.MaxBytesReader(w, req.Body, s.maxBytes+1), sess.result, s.maxBytes)
		if err == nil {
			// The rest of the body must be tar padding, not more data.
			_, err = io.Copy(io.Discard, io.LimitReader(req.Body, 1<<20))
		}
		sess.mu.Lock()
		sess.err = err
		sess.mu.Unlock()
		close(sess.done)
		if err != nil {
			http.Error(w, "result refused: "+err.Error(), http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "not found", http.StatusNotFound)
	}
}

// logWriter turns the HTTP server's error lines into log calls.
type logWriter func(msg string, keysAndValues ...any)

func (w logWriter) Write(p []byte) (int, error) {
	w("transfer server", "error", strings.TrimSpace(string(p)))
	return len(p), nil
}
