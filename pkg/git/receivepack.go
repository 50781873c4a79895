package git

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The client's half of a push (gitprotocol-pack(5), "Pushing Data To a
// Server"), over a connection the caller holds: the server's
// git-receive-pack advertises its refs, the client sends ref updates
// followed by a pack, and the server reports per ref. The caller builds
// the pack; that is why this exists. libgit2 1.5 builds the pack of a push
// itself, walking every tree of every ref the server has to find what not
// to send: 100,000 entries for a commit that changes one file of a large
// repository. A caller that knows the new objects sends just them.

// ZeroID is the object name of a ref that does not exist (SHA-1).
const ZeroID = "0000000000000000000000000000000000000000"

// PushCommand is one ref update: Old is what the server advertised for
// Ref (ZeroID: the ref is new), New what it is to point to. The server
// refuses the update if the ref moved from Old meanwhile.
type PushCommand struct{ Old, New, Ref string }

// ReadPushAdvertisement reads what git-receive-pack says first: its refs
// and its capabilities (key → value, "" when none). Over smart HTTP it
// starts with "# service=git-receive-pack" and a flush.
func ReadPushAdvertisement(r io.Reader) (Refs, map[string]string, error) {
	ad, err := readAdvertisement(newPktReader(io.LimitReader(r, maxAdvertisement)))
	if err != nil {
		return nil, nil, err
	}
	if ad.v2 {
		return nil, nil, errors.New("the server answered a push with protocol v2, which has no push")
	}
	return ad.refs, ad.caps, nil
}

// PushRequest is the command section of a push: commands, the client's
// capabilities on the first, and a flush. The pack follows it. Of what
// this client can use it asks for what the server offers: per-ref reports,
// and messages (a hook's reason for refusing) apart from them.
func PushRequest(cmds []PushCommand, serverCaps map[string]string) []byte {
	var caps []string
	for _, c := range []string{"report-status", "side-band-64k"} {
		if _, ok := serverCaps[c]; ok {
			caps = append(caps, c)
		}
	}
	if _, ok := serverCaps["agent"]; ok {
		caps = append(caps, "agent="+strings.ReplaceAll(UserAgent, " ", "-"))
	}
	var b strings.Builder
	for i, c := range cmds {
		line := c.Old + " " + c.New + " " + c.Ref
		if i == 0 {
			line += "\x00" + strings.Join(caps, " ")
		}
		b.WriteString(pkt(line + "\n"))
	}
	b.WriteString(flushPkt)
	return []byte(b.String())
}

// ErrNoPushReport: the server does not say which refs it updated (it
// lacks report-status), so a push could not tell a refusal from success.
var ErrNoPushReport = errors.New("the git server does not report the refs a push updates (no report-status capability)")

// ReadPushReport reads the server's verdict after a push: for each ref it
// reported, "" when updated, else its reason ("non-fast-forward", "failed
// to update ref", a hook's "pre-receive hook declined"). With sideband
// (the side-band-64k capability was asked for), the server's messages go
// to messages as they come; an error it sends on the error channel ends
// the read.
func ReadPushReport(r io.Reader, sideband bool, messages io.Writer) (map[string]string, error) {
	report := io.Reader(r)
	if sideband {
		var data bytes.Buffer
		in := newPktReader(r)
		for {
			kind, pkt, err := in.next()
			if err != nil {
				return nil, err
			}
			if kind == pktFlush {
				break
			}
			if kind != pktData || len(pkt) == 0 {
				return nil, errors.New("unexpected packet in the server's push response")
			}
			switch pkt[0] {
			case 1:
				data.Write(pkt[1:])
			case 2:
				_, _ = messages.Write(pkt[1:])
			case 3:
				return nil, &ServerError{Message: strings.TrimSpace(string(pkt[1:]))}
			default:
				return nil, fmt.Errorf("unknown sideband channel %d in the server's push response", pkt[0])
			}
		}
		report = &data
	}
	in := newPktReader(report)
	kind, line, err := in.next()
	if err != nil {
		return nil, err
	}
	if kind != pktData || !bytes.HasPrefix(line, []byte("unpack ")) {
		return nil, fmt.Errorf("the server's push report starts with %q, not \"unpack\"", line)
	}
	if status := string(line[len("unpack "):]); status != "ok" {
		return nil, fmt.Errorf("the server could not store the pushed objects: %s", status)
	}
	refs := map[string]string{}
	for {
		kind, line, err := in.next()
		if err != nil {
			return nil, err
		}
		if kind == pktFlush {
			return refs, nil
		}
		switch verdict, rest, _ := strings.Cut(string(line), " "); verdict {
		case "ok":
			refs[rest] = ""
		case "ng":
			ref, reason, _ := strings.Cut(rest, " ")
			if reason == "" {
				reason = "refused"
			}
			refs[ref] = reason
		default:
			return nil, fmt.Errorf("malformed line %q in the server's push report", line)
		}
	}
}
