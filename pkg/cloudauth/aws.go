package cloudauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	signerv4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	"github.com/aws/aws-sdk-go-v2/service/ecrpublic"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/fluxcd/pkg/auth/aws"
)

// awsCABundleEnv names the CA bundle AWS's SDKs and CLI trust instead of
// the system's, for a proxy or a private endpoint that re-signs TLS.
const awsCABundleEnv = "AWS_CA_BUNDLE"

// awsSDK is the library's AWS implementation (its calls of the SDK) with
// AWS_CA_BUNDLE honoured. The library hands the SDK a plain *http.Client;
// the SDK can add a bundle only to a client it builds itself, so with the
// variable set every exchange failed ("unable to add custom RootCAs
// HTTPClient"). Each call here gives the SDK a client it can build, with
// the library's transport settings (proxy, dialer, timeout) and the
// bundle as the trusted roots, as the SDK does for its own clients. The
// same is done for the calls that do not read the environment (ECR, and
// STS for a ServiceAccount), so that all of an exchange trusts the same
// CAs. Without the variable the library's client is used as it is.
type awsSDK struct{}

var _ aws.Implementation = awsSDK{}

// withCABundle returns c trusting AWS_CA_BUNDLE's certificates, or c
// itself when the variable is empty.
func withCABundle(c awssdk.HTTPClient) (awssdk.HTTPClient, error) {
	path := os.Getenv(awsCABundleEnv)
	if path == "" {
		return c, nil
	}
	hc, ok := c.(*http.Client)
	if !ok {
		// Already one the SDK builds (or one of a test): the SDK adds the
		// bundle itself where it can.
		return c, nil
	}
	base, ok := hc.Transport.(*http.Transport)
	if !ok || base == nil {
		return nil, fmt.Errorf("%s: the HTTP client's transport is a %T, to which no CA bundle can be added", awsCABundleEnv, hc.Transport)
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", awsCABundleEnv, err)
	}
	// As the SDK: the bundle replaces the system's roots (it adds to
	// roots a transport already names).
	var pool *x509.CertPool
	if base.TLSClientConfig != nil && base.TLSClientConfig.RootCAs != nil {
		pool = base.TLSClientConfig.RootCAs.Clone()
	} else {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", awsCABundleEnv, path)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if base.TLSClientConfig != nil {
		tlsConfig = base.TLSClientConfig.Clone()
	}
	tlsConfig.RootCAs = pool
	return awshttp.NewBuildableClient().WithTimeout(hc.Timeout).WithTransportOptions(func(t *http.Transport) {
		t.Proxy = base.Proxy
		if base.DialContext != nil {
			t.DialContext = base.DialContext
		}
		t.TLSClientConfig = tlsConfig
		t.TLSHandshakeTimeout = base.TLSHandshakeTimeout
		t.ResponseHeaderTimeout = base.ResponseHeaderTimeout
		t.IdleConnTimeout = base.IdleConnTimeout
	}), nil
}

func (awsSDK) LoadDefaultConfig(ctx context.Context, optFns ...func(*config.LoadOptions) error) (awssdk.Config, error) {
	// After the library's options: the client it set is replaced.
	optFns = append(optFns, func(o *config.LoadOptions) error {
		c, err := withCABundle(o.HTTPClient)
		if err != nil {
			return err
		}
		o.HTTPClient = c
		return nil
	})
	return config.LoadDefaultConfig(ctx, optFns...)
}

func (awsSDK) AssumeRoleWithWebIdentity(ctx context.Context, params *sts.AssumeRoleWithWebIdentityInput, options sts.Options) (*sts.AssumeRoleWithWebIdentityOutput, error) {
	c, err := withCABundle(options.HTTPClient)
	if err != nil {
		return nil, err
	}
	options.HTTPClient = c
	return sts.New(options).AssumeRoleWithWebIdentity(ctx, params)
}

func (awsSDK) GetAuthorizationToken(ctx context.Context, cfg awssdk.Config) (any, error) {
	c, err := withCABundle(cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	cfg.HTTPClient = c
	return ecr.NewFromConfig(cfg).GetAuthorizationToken(ctx, &ecr.GetAuthorizationTokenInput{})
}

func (awsSDK) GetPublicAuthorizationToken(ctx context.Context, cfg awssdk.Config) (any, error) {
	c, err := withCABundle(cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	cfg.HTTPClient = c
	return ecrpublic.NewFromConfig(cfg).GetAuthorizationToken(ctx, &ecrpublic.GetAuthorizationTokenInput{})
}

// errClusterAccess: the library's cluster access (EKS kubeconfigs) is
// not something image-toolkit asks for.
var errClusterAccess = errors.New("image-toolkit does not use the AWS provider for cluster access")

func (awsSDK) DescribeCluster(context.Context, *eks.DescribeClusterInput, eks.Options) (*eks.DescribeClusterOutput, error) {
	return nil, errClusterAccess
}

func (awsSDK) PresignGetCallerIdentity(context.Context, func(*sts.PresignOptions), sts.Options) (*signerv4.PresignedHTTPRequest, error) {
	return nil, errClusterAccess
}
