package testgit

import (
	"crypto/subtle"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// SOCKS5 is a SOCKS5 proxy on loopback (RFC 1928, CONNECT only), with
// username/password authentication (RFC 1929) when a username is given.
// Like Proxy it counts what it carries and only reaches loopback addresses.
type SOCKS5 struct {
	// URL is socks5://127.0.0.1:port, without credentials.
	URL string

	username, password string
	requests, rejected atomic.Int64
	ln                 net.Listener
	wg                 sync.WaitGroup
	mu                 sync.Mutex
	conns              map[net.Conn]bool
}

// NewSOCKS5 starts a SOCKS5 proxy, stopped at the end of the test.
func NewSOCKS5(t testing.TB, username, password string) *SOCKS5 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &SOCKS5{URL: "socks5://" + ln.Addr().String(), username: username, password: password, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.track(c, true)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer p.track(c, false)
				p.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// Requests counts the connections carried.
func (p *SOCKS5) Requests() int64 { return p.requests.Load() }

// Rejected counts the clients refused for missing or wrong credentials.
func (p *SOCKS5) Rejected() int64 { return p.rejected.Load() }

func (p *SOCKS5) track(c net.Conn, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if open {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *SOCKS5) serve(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// Greeting: version 5, the methods the client offers.
	head := make([]byte, 2)
	if _, err := io.ReadFull(c, head); err != nil || head[0] != 5 {
		return
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return
	}
	want := byte(0x00) // no authentication
	if p.username != "" {
		want = 0x02 // username/password
	}
	offered := false
	for _, m := range methods {
		offered = offered || m == want
	}
	if !offered {
		p.rejected.Add(1)
		_, _ = c.Write([]byte{5, 0xff})
		return
	}
	_, _ = c.Write([]byte{5, want})
	if want == 0x02 && !p.login(c) {
		return
	}
	// Request: version, command, reserved, address type, address, port.
	req := make([]byte, 4)
	if _, err := io.ReadFull(c, req); err != nil || req[0] != 5 {
		return
	}
	var host string
	switch req[3] {
	case 1, 4: // IPv4, IPv6
		ip := make([]byte, map[byte]int{1: 4, 4: 16}[req[3]])
		if _, err := io.ReadFull(c, ip); err != nil {
			return
		}
		host = net.IP(ip).String()
	case 3: // domain name
		n := make([]byte, 1)
		if _, err := io.ReadFull(c, n); err != nil {
			return
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(c, name); err != nil {
			return
		}
		host = string(name)
	default:
		return
	}
	port := make([]byte, 2)
	if _, err := io.ReadFull(c, port); err != nil {
		return
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port))))
	reply := func(code byte) { _, _ = c.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0}) }
	switch {
	case req[1] != 1: // CONNECT only
		reply(0x07)
		return
	case !loopback(addr):
		reply(0x02) // not allowed by ruleset
		return
	}
	up, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		reply(0x05) // connection refused
		return
	}
	p.track(up, true)
	defer p.track(up, false)
	p.requests.Add(1)
	reply(0x00)
	_ = c.SetDeadline(time.Time{})
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// login reads a username/password request (RFC 1929) and answers it.
func (p *SOCKS5) login(c net.Conn) bool {
	field := func() []byte {
		n := make([]byte, 1)
		if _, err := io.ReadFull(c, n); err != nil {
			return nil
		}
		b := make([]byte, n[0])
		if _, err := io.ReadFull(c, b); err != nil {
			return nil
		}
		return b
	}
	ver := make([]byte, 1)
	if _, err := io.ReadFull(c, ver); err != nil || ver[0] != 1 {
		return false
	}
	user, pass := field(), field()
	ok := subtle.ConstantTimeCompare(user, []byte(p.username)) == 1 && subtle.ConstantTimeCompare(pass, []byte(p.password)) == 1
	status := byte(1)
	if ok {
		status = 0
	} else {
		// Counted before the client hears of it, so a test that reads
		// Rejected after its failed connection sees this one.
		p.rejected.Add(1)
	}
	_, _ = c.Write([]byte{1, status})
	return ok
}
