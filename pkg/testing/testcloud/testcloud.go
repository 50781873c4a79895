// Package testcloud is a stand-in for the cloud token services and the
// GitHub App API on loopback, for protocol tests: no cloud is reachable from
// a test, so one HTTPS server answers for the clouds' real host names (AWS
// STS and ECR, Microsoft Entra ID and ACR's token exchange, the GitHub API)
// and one plain HTTP server for the GCE metadata server, each speaking the
// wire format its provider documents. Registry hosts (ECR, Artifact
// Registry, ACR) are passed through to a real registry (pkg/testing/testregistry).
//
// The real host names are kept so that the code under test, and the cloud
// SDKs under it, resolve and validate endpoints exactly as in a cluster:
// Install points the dialer of http.DefaultTransport (which the SDKs'
// clients are cloned from) at the server for those names, and adds the
// server's CA to its trust. What these tests prove is that the right
// requests are made with the right credentials and that the answers are
// read and used; they do not prove a cloud accepts our configuration.
//
// The documents the formats come from:
//   - STS AssumeRoleWithWebIdentity (Query API, XML answer):
//     https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html
//   - ECR GetAuthorizationToken (JSON 1.1, SigV4-signed):
//     https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_GetAuthorizationToken.html
//     and ECR Public's: https://docs.aws.amazon.com/AmazonECRPublic/latest/APIReference/API_GetAuthorizationToken.html
//   - GCE metadata server, service account token:
//     https://cloud.google.com/compute/docs/access/authenticate-workloads#applications
//   - Microsoft identity platform, client credentials with a federated
//     assertion: https://learn.microsoft.com/en-us/entra/identity-platform/v2-oauth2-client-creds-grant-flow
//   - ACR's AAD-token-for-refresh-token exchange (POST /oauth2/exchange):
//     https://github.com/Azure/acr/blob/main/docs/AAD-OAuth.md
//   - Google Security Token Service token exchange (RFC 8693), as
//     Workload Identity Federation uses it:
//     https://cloud.google.com/iam/docs/reference/sts/rest/v1/TopLevel/token
//     and the IAM Service Account Credentials API's impersonation:
//     https://cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/generateAccessToken
//   - GKE's metadata server attributes (cluster name and location):
//     https://cloud.google.com/kubernetes-engine/docs/concepts/workload-identity#instance_metadata
//   - Azure DevOps accepting an Entra ID token of a service principal or
//     managed identity as a bearer token:
//     https://learn.microsoft.com/en-us/azure/devops/integrate/get-started/authentication/service-principal-managed-identity
//   - GitHub App JWT and installation tokens:
//     https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app
//     https://docs.github.com/en/rest/apps/apps#create-an-installation-access-token-for-an-app
package testcloud

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Host names the HTTPS server answers for, as the SDKs and the code under
// test name them. Registries are in the test's account (123456789012),
// region (us-east-1), project and tenant.
const (
	STSHost          = "sts.us-east-1.amazonaws.com"
	STSGlobalHost    = "sts.amazonaws.com"
	ECRAPIHost       = "api.ecr.us-east-1.amazonaws.com"
	ECRPublicAPIHost = "api.ecr-public.us-east-1.amazonaws.com"
	ECRRegistry      = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
	ECRPublic        = "public.ecr.aws"
	EntraHost        = "login.microsoftonline.com"
	ACRRegistry      = "toolkit.azurecr.io"
	GARRegistry      = "europe-docker.pkg.dev"
	GitHubAPIHost    = "api.github.com"
	GoogleSTSHost    = "sts.googleapis.com"
	GoogleIAMHost    = "iamcredentials.googleapis.com"

	// GCPProject, GKELocation and GKECluster are what the metadata server
	// says of the node; the Workload Identity pool is GCPProject's.
	GCPProject  = "toolkit-project"
	GKELocation = "europe-west1"
	GKECluster  = "toolkit"

	// AzureDevOpsScope is the scope of Entra tokens Azure DevOps takes:
	// its resource's application ID.
	AzureDevOpsScope = "499b84ac-1321-427f-aa17-267ca6975798/.default"

	// Tenant is the Entra tenant the Azure tests use.
	Tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"
)

var hosts = []string{STSHost, STSGlobalHost, ECRAPIHost, ECRPublicAPIHost, ECRRegistry, ECRPublic,
	EntraHost, ACRRegistry, GARRegistry, GitHubAPIHost, GoogleSTSHost, GoogleIAMHost}

// Cloud is the running stand-in.
type Cloud struct {
	// Addr is the HTTPS server's host:port; MetadataHost the GCE metadata
	// server's (for GCE_METADATA_HOST).
	Addr, MetadataHost string
	// CAPEM is the CA of the HTTPS server's certificate.
	CAPEM []byte
	// Registry, when set, is where requests to registry hosts go (the
	// host:port of a plain HTTP pkg/testing/testregistry).
	Registry string
	// GitHubAppID and GitHubKey are the App the GitHub API knows:
	// installation tokens are issued for JWTs this key signed with this
	// App ID as issuer. GitHubKeyPEM is the key as a Secret holds it.
	GitHubAppID  int64
	GitHubKey    *rsa.PrivateKey
	GitHubKeyPEM []byte
	// TokenLifetime is the lifetime of every credential issued (1 h by
	// default; ECR's is 12 h in real life, cloud access tokens 1 h).
	TokenLifetime time.Duration

	pool     *x509.CertPool
	start    time.Time // dates ACR refresh tokens, so a test knows them in advance
	server   *httptest.Server
	metadata *httptest.Server

	mu       sync.Mutex
	calls    map[string]int
	failures []string
	issued   map[string]string    // access token → what issued it
	expires  map[string]time.Time // access token → when it expires
	roles    []string
	subjects []string
}

// Endpoints counted by Calls.
const (
	CallSTS          = "sts:AssumeRoleWithWebIdentity"
	CallECR          = "ecr:GetAuthorizationToken"
	CallECRPublic    = "ecr-public:GetAuthorizationToken"
	CallMetadata     = "gce:token"
	CallEntra        = "entra:token"
	CallACRExchange  = "acr:exchange"
	CallGitHubToken  = "github:access_tokens"
	CallGitHubLookup = "github:installation"
	CallGoogleSTS    = "gcp-sts:token"
	CallGoogleIAM    = "iamcredentials:generateAccessToken"
	CallRegistry     = "registry"
)

// New starts the servers, stopped at the end of the test.
func New(t testing.TB) *Cloud {
	t.Helper()
	c := &Cloud{calls: map[string]int{}, issued: map[string]string{}, expires: map[string]time.Time{}, GitHubAppID: 424242, TokenLifetime: time.Hour,
		start: time.Now().Truncate(time.Second)}
	var err error
	if c.GitHubKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	c.GitHubKeyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(c.GitHubKey)})
	cfg := c.newTLS(t)
	c.server = httptest.NewUnstartedServer(http.HandlerFunc(c.serve))
	c.server.TLS = cfg
	c.server.StartTLS()
	t.Cleanup(c.server.Close)
	c.Addr = strings.TrimPrefix(c.server.URL, "https://")
	c.metadata = httptest.NewServer(http.HandlerFunc(c.serveMetadata))
	t.Cleanup(c.metadata.Close)
	c.MetadataHost = strings.TrimPrefix(c.metadata.URL, "http://")
	return c
}

// Install makes http.DefaultTransport (and so every client cloned from it
// afterwards, which is how the cloud SDKs' clients are made) reach this
// stand-in for the clouds' host names and trust its CA, until the test
// ends. Tests that call it must not run in parallel.
func (c *Cloud) Install(t testing.TB) {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport)
	dial, tlsConfig := tr.DialContext, tr.TLSClientConfig
	tr.DialContext = c.DialContext(dial)
	tr.TLSClientConfig = c.TLSConfig(tlsConfig)
	tr.CloseIdleConnections()
	t.Cleanup(func() {
		tr.DialContext, tr.TLSClientConfig = dial, tlsConfig
		tr.CloseIdleConnections()
	})
}

// DialContext wraps dial (net.Dialer's when nil) so that connections to
// the clouds' host names reach this stand-in.
func (c *Cloud) DialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err == nil && c.serves(host) {
			addr = c.Addr
		}
		return dial(ctx, network, addr)
	}
}

// TLSConfig is base (or a new config) trusting the system's CAs and this
// stand-in's.
func (c *Cloud) TLSConfig(base *tls.Config) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM(c.CAPEM)
	cfg.RootCAs = pool
	return cfg
}

func (c *Cloud) serves(host string) bool {
	for _, h := range hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// Calls is how often an endpoint (Call*) was called.
func (c *Cloud) Calls(endpoint string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[endpoint]
}

// Fail makes the next call of an endpoint answer as the provider does when
// it refuses the caller.
func (c *Cloud) Fail(endpoint string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, endpoint)
}

// count records a call and reports whether it is to fail.
func (c *Cloud) count(endpoint string) (n int, fail bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[endpoint]++
	for i, f := range c.failures {
		if f == endpoint {
			c.failures = append(c.failures[:i], c.failures[i+1:]...)
			return c.calls[endpoint], true
		}
	}
	return c.calls[endpoint], false
}

// issue records an access token and where it came from.
func (c *Cloud) issue(token, what string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.issued[token] = what
	c.expires[token] = time.Now().Add(c.TokenLifetime)
	return token
}

// Honoured reports whether token was issued here and has not expired,
// and what issued it: what a service taking these tokens checks.
func (c *Cloud) Honoured(token string) (what string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	what, ok = c.issued[token]
	return what, ok && time.Now().Before(c.expires[token])
}

// IssuedTokens are every token and credential issued so far (access
// keys, access tokens, refresh tokens, installation tokens; ECR's
// passwords are derived, see ECRPassword), for tests that check no
// credential leaks into logs, events or status.
func (c *Cloud) IssuedTokens() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.issued))
	for tok := range c.issued {
		out = append(out, tok)
	}
	return out
}

// ExpiresAt is when an issued token expires (zero when not issued here).
func (c *Cloud) ExpiresAt(token string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.expires[token]
}

// AzureDevOpsAuthorized is Azure DevOps' check of a git request's
// Authorization header: a bearer token Entra ID issued for Azure DevOps's
// scope, not expired. For pkg/testing/testgit's Options.Authorize.
func (c *Cloud) AzureDevOpsAuthorized(authorization string) bool {
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok {
		return false
	}
	what, ok := c.Honoured(token)
	scopes, entra := strings.CutPrefix(what, "entra:")
	// MSAL adds OpenID scopes to the one asked for.
	return ok && entra && contains(strings.Fields(scopes), AzureDevOpsScope)
}

// subject records who a token was issued to (the assertion's subject,
// the impersonated account), for Subjects.
func (c *Cloud) subject(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subjects = append(c.subjects, s)
}

// Subjects are the identities tokens were issued to, in order: for Entra
// "entra client=<client_id> sub=<assertion subject> aud=<its audiences>", for Google's STS
// "gcp-sts aud=<audience> sub=<subject token subject>", for
// impersonation "gcp-iam <service account email>".
func (c *Cloud) Subjects() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.subjects...)
}

// jwtClaims decodes a JWT's claims without verifying it: the stand-ins
// record whose token they were given (a Kubernetes ServiceAccount token
// of the real API server, in envtest); the clouds verify it against the
// cluster's issuer, which they cannot reach here.
func jwtClaims(token string) (sub string, aud []string, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", nil, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", nil, false
	}
	var claims struct {
		Sub string          `json:"sub"`
		Aud json.RawMessage `json:"aud"`
	}
	if json.Unmarshal(b, &claims) != nil {
		return "", nil, false
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		aud = []string{one}
	} else {
		_ = json.Unmarshal(claims.Aud, &aud)
	}
	return claims.Sub, aud, true
}

func (c *Cloud) issuedBy(token string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.issued[token]
	return w, ok
}

// Credential values, numbered by the call that issued them, so that a test
// knows what the registry or git server must see.

// ECRPassword is the registry password of the n-th ECR token.
func ECRPassword(n int) string { return fmt.Sprintf("ecr-password-%d", n) }

// ECRPublicPassword is the registry password of the n-th ECR Public token.
func ECRPublicPassword(n int) string { return fmt.Sprintf("ecr-public-password-%d", n) }

// GCPToken is the n-th access token of the metadata server.
func GCPToken(n int) string { return fmt.Sprintf("ya29.metadata-token-%d", n) }

// EntraToken is the n-th access token of Entra ID's token endpoint.
func EntraToken(n int) string { return fmt.Sprintf("entra-access-token-%d", n) }

// GoogleSTSToken is the n-th federated access token of Google's STS.
func GoogleSTSToken(n int) string { return fmt.Sprintf("ya29.sts-token-%d", n) }

// GoogleIAMToken is the n-th access token of an impersonated Google
// service account.
func GoogleIAMToken(n int) string { return fmt.Sprintf("ya29.impersonated-token-%d", n) }

// GitHubToken is the n-th installation token.
func GitHubToken(n int) string { return fmt.Sprintf("ghs_installation%06d", n) }

// ACRUser is the user name ACR refresh tokens are used with.
const ACRUser = "00000000-0000-0000-0000-000000000000"

// ACRRefreshToken is the n-th refresh token of /oauth2/exchange: a JWT,
// as ACR's is (clients read its exp claim), unsigned since nobody checks
// its signature but the registry.
func (c *Cloud) ACRRefreshToken(n int) string {
	exp := c.start.Add(c.TokenLifetime)
	enc := base64.RawURLEncoding.EncodeToString
	header := enc([]byte(`{"alg":"RS256","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{"jti": strconv.Itoa(n), "sub": "workload", "exp": exp.Unix(),
		"iat": c.start.Unix(), "iss": "Azure Container Registry", "aud": ACRRegistry, "grant_type": "refresh_token"})
	return header + "." + enc(claims) + "." + enc([]byte("signature"))
}

func (c *Cloud) serve(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	switch {
	case host == STSHost || host == STSGlobalHost:
		c.serveSTS(w, r)
	case host == ECRAPIHost:
		c.serveECR(w, r, false)
	case host == ECRPublicAPIHost:
		c.serveECR(w, r, true)
	case host == EntraHost:
		c.serveEntra(w, r)
	case host == ACRRegistry && r.URL.Path == "/oauth2/exchange":
		c.serveACRExchange(w, r)
	case host == GoogleSTSHost:
		c.serveGoogleSTS(w, r)
	case host == GoogleIAMHost:
		c.serveGoogleIAM(w, r)
	case host == GitHubAPIHost || strings.HasPrefix(r.URL.Path, "/api/v3/"):
		c.serveGitHub(w, r)
	case host == ECRRegistry || host == ECRPublic || host == ACRRegistry || host == GARRegistry:
		c.serveRegistry(w, r)
	default:
		http.Error(w, "testcloud: no such host "+host, http.StatusNotFound)
	}
}

// serveSTS answers AssumeRoleWithWebIdentity. The call is not signed: the
// web identity token is the credential.
func (c *Cloud) serveSTS(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.PostForm.Get("Action") != "AssumeRoleWithWebIdentity" {
		stsError(w, http.StatusBadRequest, "InvalidAction", "testcloud serves only AssumeRoleWithWebIdentity")
		return
	}
	n, fail := c.count(CallSTS)
	role, token, session := r.PostForm.Get("RoleArn"), r.PostForm.Get("WebIdentityToken"), r.PostForm.Get("RoleSessionName")
	switch {
	case fail:
		stsError(w, http.StatusForbidden, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")
		return
	case !regexp.MustCompile(`^arn:aws:iam::\d{12}:role/.+`).MatchString(role) || session == "":
		stsError(w, http.StatusBadRequest, "ValidationError", "RoleArn and RoleSessionName are required")
		return
	case strings.Count(token, ".") != 2:
		stsError(w, http.StatusBadRequest, "InvalidIdentityToken", "the web identity token is not a JWT")
		return
	}
	akid := fmt.Sprintf("ASIATESTCLOUD%07d", n)
	c.issue(akid, "sts:"+role)
	c.mu.Lock()
	c.roles = append(c.roles, role)
	c.mu.Unlock()
	exp := time.Now().Add(c.TokenLifetime).UTC().Format(time.RFC3339)
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:test</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/%s</Arn>
      <AssumedRoleId>AROATESTCLOUD:%s</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>session-token-%d</SessionToken>
      <SecretAccessKey>secret-access-key-%d</SecretAccessKey>
      <Expiration>%s</Expiration>
      <AccessKeyId>%s</AccessKeyId>
    </Credentials>
    <Provider>oidc.eks.us-east-1.amazonaws.com</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>%d</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>`, role[strings.LastIndex(role, "/")+1:], session, n, n, exp, akid, n)
}

func stsError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>1</RequestId></ErrorResponse>`, code, msg)
}

// serveECR answers GetAuthorizationToken, signed (SigV4) with credentials
// STS issued.
func (c *Cloud) serveECR(w http.ResponseWriter, r *http.Request, public bool) {
	target, call := "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken", CallECR
	service := "ecr"
	if public {
		target, call, service = "SpencerFrontendService.GetAuthorizationToken", CallECRPublic, "ecr-public"
	}
	if r.Method != http.MethodPost || r.Header.Get("X-Amz-Target") != target {
		awsJSONError(w, http.StatusBadRequest, "UnknownOperationException", "testcloud serves only "+target)
		return
	}
	n, fail := c.count(call)
	// Authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/ecr/aws4_request, ...
	m := regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/]+)/\d{8}/([a-z0-9-]+)/([a-z-]+)/aws4_request`).FindStringSubmatch(r.Header.Get("Authorization"))
	switch {
	case fail:
		awsJSONError(w, http.StatusBadRequest, "AccessDeniedException", "not authorized to perform ecr:GetAuthorizationToken")
		return
	case m == nil || m[3] != service:
		awsJSONError(w, http.StatusForbidden, "MissingAuthenticationTokenException", "request not signed for "+service)
		return
	}
	if _, ok := c.issuedBy(m[1]); !ok || r.Header.Get("X-Amz-Security-Token") == "" {
		awsJSONError(w, http.StatusForbidden, "UnrecognizedClientException", "The security token included in the request is invalid.")
		return
	}
	user, pass := "AWS", ECRPassword(n)
	if public {
		pass = ECRPublicPassword(n)
	}
	token := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	exp := float64(time.Now().Add(c.TokenLifetime).UnixMilli()) / 1000
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	data := map[string]any{"authorizationToken": token, "expiresAt": exp}
	if public {
		_ = json.NewEncoder(w).Encode(map[string]any{"authorizationData": data})
		return
	}
	data["proxyEndpoint"] = "https://" + ECRRegistry
	_ = json.NewEncoder(w).Encode(map[string]any{"authorizationData": []any{data}})
}

func awsJSONError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": msg})
}

// serveMetadata answers the GCE metadata server's token and identity
// endpoints; every request must carry Metadata-Flavor: Google.
func (c *Cloud) serveMetadata(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Metadata-Flavor", "Google")
	if r.Header.Get("Metadata-Flavor") != "Google" {
		http.Error(w, "Missing Metadata-Flavor:Google header", http.StatusForbidden)
		return
	}
	switch p := strings.TrimPrefix(r.URL.Path, "/computeMetadata/v1/"); p {
	case "instance/service-accounts/default/token":
		n, fail := c.count(CallMetadata)
		if fail {
			http.Error(w, "service account not enabled on this instance", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": c.issue(GCPToken(n), "gce"),
			"expires_in": int(c.TokenLifetime.Seconds()), "token_type": "Bearer"})
	case "project/project-id":
		fmt.Fprint(w, GCPProject)
	case "instance/attributes/cluster-location":
		fmt.Fprint(w, GKELocation)
	case "instance/attributes/cluster-name":
		fmt.Fprint(w, GKECluster)
	case "instance/service-accounts/default/email":
		fmt.Fprint(w, "reflector@toolkit-project.iam.gserviceaccount.com")
	case "universe/universe-domain", "universe/universe_domain":
		fmt.Fprint(w, "googleapis.com")
	case "":
		fmt.Fprint(w, "computeMetadata/")
	default:
		http.NotFound(w, r)
	}
}

// serveEntra answers the Microsoft identity platform: instance and tenant
// discovery (MSAL reads them before the first token), and the token
// endpoint's client credentials grant with a federated assertion (the
// Kubernetes ServiceAccount token), as Azure Workload Identity uses it.
func (c *Cloud) serveEntra(w http.ResponseWriter, r *http.Request) {
	base := "https://" + EntraHost
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/common/discovery/instance":
		_ = json.NewEncoder(w).Encode(map[string]any{
			"tenant_discovery_endpoint": base + "/" + Tenant + "/v2.0/.well-known/openid-configuration",
			"api-version":               "1.1",
			"metadata": []map[string]any{{"preferred_network": EntraHost, "preferred_cache": EntraHost,
				"aliases": []string{EntraHost}}},
		})
	case strings.HasSuffix(r.URL.Path, "/v2.0/.well-known/openid-configuration"):
		tenant := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0]
		_ = json.NewEncoder(w).Encode(map[string]any{
			"token_endpoint":           base + "/" + tenant + "/oauth2/v2.0/token",
			"authorization_endpoint":   base + "/" + tenant + "/oauth2/v2.0/authorize",
			"issuer":                   base + "/" + tenant + "/v2.0",
			"jwks_uri":                 base + "/" + tenant + "/discovery/v2.0/keys",
			"response_modes_supported": []string{"query", "fragment", "form_post"},
		})
	case strings.HasSuffix(r.URL.Path, "/oauth2/v2.0/token") && r.Method == http.MethodPost:
		n, fail := c.count(CallEntra)
		_ = r.ParseForm()
		f := r.PostForm
		entraError := func(code, desc string) {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": code, "error_description": desc, "error_codes": []int{700016}})
		}
		switch {
		case fail:
			entraError("invalid_client", "AADSTS70021: No matching federated identity record found for presented assertion.")
			return
		case f.Get("grant_type") != "client_credentials" || f.Get("client_id") == "":
			entraError("invalid_request", "AADSTS900144: The request body must contain grant_type and client_id.")
			return
		case f.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" || strings.Count(f.Get("client_assertion"), ".") != 2:
			entraError("invalid_client", "AADSTS7000215: Invalid client assertion.")
			return
		case !strings.Contains(f.Get("scope"), "/.default"):
			entraError("invalid_scope", "AADSTS1002012: The provided value for scope is not valid.")
			return
		}
		sub, aud, _ := jwtClaims(f.Get("client_assertion"))
		c.subject("entra client=" + f.Get("client_id") + " sub=" + sub + " aud=" + strings.Join(aud, ","))
		token := c.issue(EntraToken(n), "entra:"+f.Get("scope"))
		_ = json.NewEncoder(w).Encode(map[string]any{"token_type": "Bearer", "expires_in": int(c.TokenLifetime.Seconds()),
			"ext_expires_in": int(c.TokenLifetime.Seconds()), "access_token": token})
	default:
		http.NotFound(w, r)
	}
}

// EntraScope is the scope an Entra token was issued for, "" when the
// token was not issued here.
func (c *Cloud) EntraScope(token string) string {
	w, _ := c.issuedBy(token)
	return strings.TrimPrefix(w, "entra:")
}

// serveACRExchange trades an Entra access token for an ACR refresh token.
func (c *Cloud) serveACRExchange(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	n, fail := c.count(CallACRExchange)
	f := r.PostForm
	w.Header().Set("Content-Type", "application/json")
	scope := c.EntraScope(f.Get("access_token"))
	switch {
	case fail || scope == "":
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": "UNAUTHORIZED", "message": "the access token is invalid"}}})
		return
	case f.Get("grant_type") != "access_token" || f.Get("service") != ACRRegistry:
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": "BAD_REQUEST", "message": "grant_type access_token and service are required"}}})
		return
	}
	rt := c.issue(c.ACRRefreshToken(n), "acr")
	_ = json.NewEncoder(w).Encode(map[string]string{"refresh_token": rt})
}

// ACRRefreshTokens are the refresh tokens issued so far.
func (c *Cloud) ACRRefreshTokens() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for tok, w := range c.issued {
		if w == "acr" {
			out = append(out, tok)
		}
	}
	return out
}

// WorkloadIdentityAudience is the audience GKE's Workload Identity
// exchanges a Kubernetes token for: the pool and the cluster as provider.
const WorkloadIdentityAudience = "identitynamespace:" + GCPProject + ".svc.id.goog:https://container.googleapis.com/v1/projects/" +
	GCPProject + "/locations/" + GKELocation + "/clusters/" + GKECluster

// serveGoogleSTS answers Google's token exchange: a Kubernetes
// ServiceAccount token (subject_token, a JWT whose audience is the
// Workload Identity pool) for a federated access token.
func (c *Cloud) serveGoogleSTS(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	stsError := func(status int, code, desc string) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/token" || r.ParseForm() != nil {
		stsError(http.StatusNotFound, "invalid_request", "testcloud serves only POST /v1/token")
		return
	}
	n, fail := c.count(CallGoogleSTS)
	f := r.PostForm
	sub, aud, ok := jwtClaims(f.Get("subject_token"))
	switch {
	case fail:
		stsError(http.StatusForbidden, "access_denied", "The caller does not have permission")
		return
	case f.Get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange" ||
		f.Get("subject_token_type") != "urn:ietf:params:oauth:token-type:jwt" ||
		f.Get("requested_token_type") != "urn:ietf:params:oauth:token-type:access_token":
		stsError(http.StatusBadRequest, "invalid_request", "Invalid value for grant_type, subject_token_type or requested_token_type")
		return
	case !ok:
		stsError(http.StatusBadRequest, "invalid_grant", "The subject token is not a JWT")
		return
	case f.Get("audience") != WorkloadIdentityAudience:
		stsError(http.StatusBadRequest, "invalid_target", "The target service indicated by the audience parameter is invalid")
		return
	case !contains(aud, GCPProject+".svc.id.goog"):
		stsError(http.StatusBadRequest, "invalid_grant", "The audience in the subject token does not match the workload identity pool")
		return
	}
	c.subject("gcp-sts aud=" + strings.Join(aud, ",") + " sub=" + sub)
	token := c.issue(GoogleSTSToken(n), "gcp-sts:"+sub)
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token,
		"issued_token_type": "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer",
		"expires_in": int(c.TokenLifetime.Seconds())})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// serveGoogleIAM answers generateAccessToken for a Google service account
// impersonated with a federated token of Google's STS.
func (c *Cloud) serveGoogleIAM(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	iamError := func(status int, msg string) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": status, "message": msg}})
	}
	m := regexp.MustCompile(`^/v1/projects/-/serviceAccounts/([^/:]+):generateAccessToken$`).FindStringSubmatch(r.URL.Path)
	if m == nil || r.Method != http.MethodPost {
		iamError(http.StatusNotFound, "Not Found")
		return
	}
	n, fail := c.count(CallGoogleIAM)
	bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	var body struct {
		Scope []string `json:"scope"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	if what, ok := c.Honoured(bearer); fail || !ok || !strings.HasPrefix(what, "gcp-sts:") {
		iamError(http.StatusForbidden, "Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).")
		return
	}
	if len(body.Scope) == 0 {
		iamError(http.StatusBadRequest, "Scope required.")
		return
	}
	c.subject("gcp-iam " + m[1])
	token := c.issue(GoogleIAMToken(n), "gcp-iam:"+m[1])
	_ = json.NewEncoder(w).Encode(map[string]string{"accessToken": token,
		"expireTime": time.Now().Add(c.TokenLifetime).UTC().Format(time.RFC3339)})
}

// serveGitHub answers the GitHub App endpoints an installation token
// needs: POST /app/installations/{id}/access_tokens, and the lookup of an
// installation by organization or user. Each needs a JWT of the App:
// RS256, iss the App ID, iat no later than now (GitHub allows clock skew
// of a minute), exp at most 10 minutes after iat. GitHub Enterprise serves
// the same under /api/v3/.
func (c *Cloud) serveGitHub(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/api/v3")
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	ghError := func(status int, msg string) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": msg,
			"documentation_url": "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"})
	}
	if err := c.checkAppJWT(r.Header.Get("Authorization")); err != nil {
		ghError(http.StatusUnauthorized, err.Error())
		return
	}
	if m := regexp.MustCompile(`^/(orgs|users)/([^/]+)/installation$`).FindStringSubmatch(path); m != nil && r.Method == http.MethodGet {
		c.count(CallGitHubLookup)
		if m[2] != "toolkit-org" {
			ghError(http.StatusNotFound, "Not Found")
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": 1001, "app_id": c.GitHubAppID,
			"account": map[string]any{"login": m[2]}})
		return
	}
	m := regexp.MustCompile(`^/app/installations/(\d+)/access_tokens$`).FindStringSubmatch(path)
	if m == nil || r.Method != http.MethodPost {
		ghError(http.StatusNotFound, "Not Found")
		return
	}
	n, fail := c.count(CallGitHubToken)
	if fail || m[1] != "1001" {
		ghError(http.StatusNotFound, "Not Found")
		return
	}
	token := c.issue(GitHubToken(n), "github")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"token": token,
		"expires_at":           time.Now().Add(c.TokenLifetime).UTC().Format(time.RFC3339),
		"permissions":          map[string]string{"contents": "write", "metadata": "read"},
		"repository_selection": "all"})
}

// checkAppJWT verifies an "Authorization: Bearer <JWT>" of the App.
func (c *Cloud) checkAppJWT(header string) error {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok {
		return fmt.Errorf("A JSON web token could not be decoded")
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return fmt.Errorf("A JSON web token could not be decoded")
	}
	var hdr struct{ Alg string }
	var claims struct {
		Iss any   `json:"iss"`
		Iat int64 `json:"iat"`
		Exp int64 `json:"exp"`
	}
	for i, v := range []any{&hdr, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(b, v) != nil {
			return fmt.Errorf("A JSON web token could not be decoded")
		}
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || hdr.Alg != "RS256" {
		return fmt.Errorf("'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(&c.GitHubKey.PublicKey, crypto.SHA256, sum[:], sig) != nil {
		return fmt.Errorf("A JSON web token could not be decoded")
	}
	if fmt.Sprint(claims.Iss) != strconv.FormatInt(c.GitHubAppID, 10) {
		return fmt.Errorf("Integration not found")
	}
	now := time.Now().Unix()
	switch {
	case claims.Iat > now+60:
		return fmt.Errorf("'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued")
	case claims.Exp <= now || claims.Exp-claims.Iat > 600:
		return fmt.Errorf("'Expiration time' claim ('exp') is too far in the future")
	}
	return nil
}

// serveRegistry passes registry requests to the test's registry,
// counting them.
func (c *Cloud) serveRegistry(w http.ResponseWriter, r *http.Request) {
	c.count(CallRegistry)
	if c.Registry == "" {
		http.Error(w, "testcloud: no registry behind this host", http.StatusBadGateway)
		return
	}
	p := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(&url.URL{Scheme: "http", Host: c.Registry})
		pr.Out.Host = pr.In.Host
	}}
	p.ServeHTTP(w, r)
}

// newTLS makes a CA and a certificate for every host name served.
func (c *Cloud) newTLS(t testing.TB) *tls.Config {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "testcloud CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	c.CAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "testcloud"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: append([]string{"localhost"}, hosts...), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	c.pool = x509.NewCertPool()
	c.pool.AddCert(ca)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// URL is the HTTPS server's own address (for a GitHub Enterprise base
// URL, say).
func (c *Cloud) URL() string { return c.server.URL }

// AssumedRoles are the role ARNs STS issued credentials for, in order.
func (c *Cloud) AssumedRoles() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.roles...)
}
