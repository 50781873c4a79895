package gitremote

import (
	"errors"
	"fmt"
	"net/url"
)

// FromSecrets builds Options from the data of the Secrets a Flux
// GitRepository (or an UpdateJob) names, with Flux's keys. auth: username
// and password, or bearerToken, and ca.crt for HTTP(S); identity,
// known_hosts and password for SSH. proxy: address, username, password.
// Either may be nil. It checks what the URL's scheme needs and that keys
// and certificates parse, so that a bad Secret is reported before any
// network call.
func FromSecrets(rawURL string, auth, proxy map[string][]byte) (Options, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return Options{}, fmt.Errorf("invalid repository URL: %w", err)
	}
	var o Options
	o.Username, o.Password = string(auth["username"]), string(auth["password"])
	o.BearerToken = string(auth["bearerToken"])
	o.CAFile, o.Identity, o.KnownHosts = auth["ca.crt"], auth["identity"], auth["known_hosts"]
	switch u.Scheme {
	case "http", "https":
		if o.CAFile != nil {
			if _, err := tlsConfig(o.CAFile); err != nil {
				return Options{}, err
			}
		}
	case "ssh":
		if len(o.Identity) == 0 {
			return Options{}, errors.New("an ssh URL needs a Secret with identity (a private key)")
		}
		if _, err := ParseIdentity(o.Identity, o.Password); err != nil {
			return Options{}, err
		}
		if len(o.KnownHosts) == 0 {
			return Options{}, errors.New("an ssh URL needs known_hosts in its Secret: host keys are always checked")
		}
		if _, err := knownHostsFromBytes(o.KnownHosts); err != nil {
			return Options{}, err
		}
	default:
		return Options{}, fmt.Errorf("unsupported URL scheme %q: want http, https or ssh", u.Scheme)
	}
	if proxy != nil {
		addr := string(proxy["address"])
		if addr == "" {
			return Options{}, errors.New("the proxy Secret has no address")
		}
		p, err := url.Parse(addr)
		if err != nil || p.Host == "" || (p.Scheme != "http" && p.Scheme != "https" && p.Scheme != "socks5") {
			return Options{}, errors.New("the proxy address must be a URL such as http://proxy.example.com:8080")
		}
		if u.Scheme == "ssh" {
			return Options{}, errors.New("a proxy is only supported for http and https URLs")
		}
		if user := string(proxy["username"]); user != "" {
			p.User = url.UserPassword(user, string(proxy["password"]))
		}
		o.Proxy = p
	}
	return o, nil
}

// Secrets lists the credential values of o, for redacting them from
// messages.
func (o Options) Secrets() []string {
	s := []string{o.Password, o.BearerToken}
	if o.Proxy != nil {
		if p, ok := o.Proxy.User.Password(); ok {
			s = append(s, p)
		}
	}
	return s
}
