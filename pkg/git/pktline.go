package git

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Special pkt-lines of git's wire protocol (gitprotocol-common(5)).
const (
	flushPkt = "0000"
	delimPkt = "0001"
)

// maxPktLen is the longest pkt-line git allows, length prefix included.
const maxPktLen = 65520

// pktKind says what readPkt found.
type pktKind int

const (
	pktData pktKind = iota
	pktFlush
	pktDelim
	pktEnd // response-end (0002), v2 over stateless transports
)

type pktReader struct {
	r   *bufio.Reader
	buf []byte
}

func newPktReader(r io.Reader) *pktReader {
	return &pktReader{r: bufio.NewReader(r), buf: make([]byte, maxPktLen)}
}

// next reads one pkt-line. The data is valid until the next call; a
// trailing LF is removed. An "ERR" packet becomes an error.
func (p *pktReader) next() (pktKind, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(p.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, errors.New("the server's response ended early")
		}
		return 0, nil, err
	}
	n, err := strconv.ParseUint(string(hdr[:]), 16, 16)
	if err != nil {
		return 0, nil, fmt.Errorf("not a git pkt-line: %q", hdr[:])
	}
	switch n {
	case 0:
		return pktFlush, nil, nil
	case 1:
		return pktDelim, nil, nil
	case 2:
		return pktEnd, nil, nil
	case 3:
		return 0, nil, fmt.Errorf("invalid pkt-line length %d", n)
	}
	if n > maxPktLen {
		return 0, nil, fmt.Errorf("pkt-line of %d bytes exceeds %d", n, maxPktLen)
	}
	data := p.buf[:n-4]
	if _, err := io.ReadFull(p.r, data); err != nil {
		return 0, nil, errors.New("the server's response ended inside a pkt-line")
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	if msg, ok := bytes.CutPrefix(data, []byte("ERR ")); ok {
		return 0, nil, &ServerError{Message: string(msg)}
	}
	return pktData, data, nil
}

// ServerError is an error the git server sent (an ERR packet).
type ServerError struct{ Message string }

func (e *ServerError) Error() string { return "git server: " + e.Message }

func pkt(s string) string {
	return fmt.Sprintf("%04x%s", len(s)+4, s)
}

// advertisement is the first thing an upload-pack server says: in protocol
// v0/v1 its refs, in v2 its capabilities.
type advertisement struct {
	v2   bool
	caps map[string]string // capabilities, key → value ("" when none)
	refs Refs              // v0/v1
	// symrefs are the v0/v1 symref= capabilities: HEAD → refs/heads/main.
	symrefs map[string]string
}

// readAdvertisement parses an upload-pack advertisement. Over smart HTTP it
// starts with "# service=git-upload-pack" and a flush.
func readAdvertisement(r *pktReader) (*advertisement, error) {
	kind, data, err := r.next()
	if err != nil {
		return nil, err
	}
	if kind == pktData && bytes.HasPrefix(data, []byte("# service=")) {
		if kind, _, err = r.next(); err != nil {
			return nil, err
		} else if kind != pktFlush {
			return nil, errors.New("no flush after the service line")
		}
		if kind, data, err = r.next(); err != nil {
			return nil, err
		}
	}
	ad := &advertisement{refs: Refs{}, caps: map[string]string{}, symrefs: map[string]string{}}
	if kind == pktData && string(data) == "version 2" {
		ad.v2 = true
		for {
			kind, data, err := r.next()
			if err != nil {
				return nil, err
			}
			if kind == pktFlush {
				return ad, nil
			}
			k, v, _ := strings.Cut(string(data), "=")
			ad.caps[k] = v
		}
	}
	if kind == pktData && string(data) == "version 1" {
		if kind, data, err = r.next(); err != nil {
			return nil, err
		}
	}
	// v0: "<oid> <name>\0<capabilities>" first, then "<oid> <name>"; an
	// empty repository sends "<zero-oid> capabilities^{}".
	first := true
	for ; ; kind, data, err = r.next() {
		if err != nil {
			return nil, err
		}
		if kind == pktFlush {
			return ad, nil
		}
		if kind != pktData {
			return nil, errors.New("unexpected special packet in the ref advertisement")
		}
		if first {
			var caps []byte
			data, caps, _ = bytes.Cut(data, []byte{0})
			for _, c := range strings.Fields(string(caps)) {
				k, v, _ := strings.Cut(c, "=")
				ad.caps[k] = v
				if sym, ok := strings.CutPrefix(c, "symref="); ok {
					if from, to, ok := strings.Cut(sym, ":"); ok {
						ad.symrefs[from] = to
					}
				}
			}
			first = false
		}
		oid, name, ok := strings.Cut(string(data), " ")
		if !ok || !validOID(oid) {
			return nil, fmt.Errorf("malformed ref line %q", data)
		}
		if name == "capabilities^{}" {
			continue
		}
		ad.refs[name] = oid
	}
}

// lsRefsRequest is a v2 ls-refs command for refs under the given prefixes.
func lsRefsRequest(caps map[string]string, prefixes []string, symrefs bool) []byte {
	var b strings.Builder
	b.WriteString(pkt("command=ls-refs\n"))
	if _, ok := caps["agent"]; ok {
		b.WriteString(pkt("agent=" + UserAgent + "\n"))
	}
	if f, ok := caps["object-format"]; ok && f != "" {
		b.WriteString(pkt("object-format=" + f + "\n"))
	}
	b.WriteString(delimPkt)
	b.WriteString(pkt("peel\n"))
	if symrefs {
		b.WriteString(pkt("symrefs\n"))
	}
	for _, p := range prefixes {
		b.WriteString(pkt("ref-prefix " + p + "\n"))
	}
	b.WriteString(flushPkt)
	return []byte(b.String())
}

// readLsRefs parses a v2 ls-refs response: "<oid> <name>[ attr...]" lines
// up to a flush. Peeled tags are recorded as name^{}, as in v0.
func readLsRefs(r *pktReader, symrefs map[string]string) (Refs, error) {
	refs := Refs{}
	for {
		kind, data, err := r.next()
		if err != nil {
			return nil, err
		}
		if kind == pktFlush || kind == pktEnd {
			return refs, nil
		}
		fields := strings.Split(string(data), " ")
		if len(fields) < 2 || !validOID(fields[0]) {
			return nil, fmt.Errorf("malformed ls-refs line %q", data)
		}
		refs[fields[1]] = fields[0]
		for _, attr := range fields[2:] {
			if peeled, ok := strings.CutPrefix(attr, "peeled:"); ok && validOID(peeled) {
				refs[fields[1]+"^{}"] = peeled
			}
			if target, ok := strings.CutPrefix(attr, "symref-target:"); ok && symrefs != nil {
				symrefs[fields[1]] = target
			}
		}
	}
}

// validOID accepts SHA-1 and SHA-256 object names in lower-case hex.
func validOID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
