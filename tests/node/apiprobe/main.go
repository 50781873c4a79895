// Command apiprobe runs in a pod and asks the API server who it is, the
// way an in-cluster client does: through the kubernetes Service
// (KUBERNETES_SERVICE_HOST), with the pod's ServiceAccount token, trusting
// only the mounted ca.crt. It prints "user <name>" and exits 0, or prints
// the error and exits 1: a TLS failure (a serving certificate without the
// Service address) or a refused token fails the probe.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"

func main() {
	if err := probe(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func probe() error {
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %sca.crt", sa)
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST or _PORT not set")
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	body := []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)
	req, err := http.NewRequest(http.MethodPost, "https://"+net.JoinHostPort(host, port)+"/apis/authentication.k8s.io/v1/selfsubjectreviews", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	var r struct {
		Status struct {
			UserInfo struct{ Username string } `json:"userInfo"`
		}
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	fmt.Printf("user %s via %s\n", r.Status.UserInfo.Username, host)
	return nil
}
