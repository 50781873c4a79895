package mirror

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	git2go "github.com/libgit2/git2go/v34"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/git/refname"
	"toolkit.dev/image-toolkit/pkg/writeback"
)

// pushRefPrefix names the refs older versions pushed from (see Open).
const pushRefPrefix = "refs/image-toolkit/push/"

// Push sets every ref in refs to commit in one push, returning when ctx
// ends (with an error wrapping ctx.Err()). A ref pushed without Force
// that moved since the fetch is left alone and ErrNonFastForward
// returned. That is usually found before anything is sent (the mirror
// lacks the server's new commit, or it is not an ancestor), and then no
// ref is updated; when the server refuses instead (the ref moved after it
// advertised it), the other refs may have been.
//
// The push speaks git-receive-pack itself over the operation's transport
// (the same connections, TLS, host keys and credentials as a fetch), and
// only the pack is its own: libgit2 1.5's push (git_push_finish's
// queue_objects → git_packbuilder_insert_walk) marks every tree of every
// ref the server advertises as uninteresting, entry by entry, before it
// packs anything; on a repository of 100,000 files that walk was most of a
// job's time, whatever the job changed. The pack here holds what the
// commit adds to its parent when the server has the parent (every job
// commits on the head it fetched), found along the changed paths only.
func (m *Mirror) Push(ctx context.Context, auth *git.Auth, commit Hash, refs []writeback.RefUpdate) error {
	return m.push(ctx, auth, commit.oid(), refs)
}

// push is Push on libgit2's object names.
func (m *Mirror) push(ctx context.Context, auth *git.Auth, commit *git2go.Oid, refs []writeback.RefUpdate) error {
	if len(refs) == 0 {
		return errors.New("nothing to push: no refs")
	}
	names := make([]string, len(refs))
	for i, r := range refs {
		if !refname.Valid(r.Dst) || !strings.HasPrefix(r.Dst, "refs/") {
			return fmt.Errorf("cannot push to %q: not a full, valid ref name like refs/heads/main", r.Dst)
		}
		names[i] = r.Dst
	}
	where := "pushing " + strings.Join(names, ", ") + " to"
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", where, git.Redact(m.URL), err)
	}
	s, err := newSession(ctx, auth, m.URL)
	if err != nil {
		return fmt.Errorf("%s %s: %w", where, git.Redact(m.URL), err)
	}
	defer s.close()
	// What the server says while it takes the push: a hook's reason for
	// refusing it ("protected branch ...") comes only this way, and a
	// refusal without it leaves the operator guessing.
	var said git.Capped
	var sent bytes.Buffer
	report, err := m.receivePack(s, commit, refs, &said, &sent)
	var nff *nonFastForwardError
	switch {
	case errors.As(err, &nff):
		return fmt.Errorf("%s %s: %w (%s)", where, git.Redact(m.URL), ErrNonFastForward, nff.why)
	case err != nil:
		return s.err(where, err)
	}
	var rejected []string
	nffRefused := false
	for _, r := range refs {
		if why, ok := report[r.Dst]; ok && why != "" {
			rejected = append(rejected, r.Dst+": "+why)
			nffRefused = nffRefused || nonFastForward(why)
		}
	}
	switch {
	case nffRefused:
		return fmt.Errorf("%s %s: %w (%s)", where, git.Redact(m.URL), ErrNonFastForward, strings.Join(rejected, "; "))
	case len(rejected) > 0:
		msg := strings.Join(rejected, "; ")
		if r := remoteSaid(said.String()); r != "" {
			msg += " (the server said: " + s.scrub(r) + ")"
		}
		return fmt.Errorf("%s %s: rejected: %s", where, git.Redact(m.URL), msg)
	}
	// The push has landed: a mirror that cannot keep its pack is not the
	// push's failure (inMemory).
	_ = m.keep(sent.Bytes())
	return nil
}

// nonFastForwardError: a ref would not move forward; why says how.
type nonFastForwardError struct{ why string }

func (e *nonFastForwardError) Error() string { return e.why }

// receivePack is the push's conversation with the server: its refs, the
// commands and the pack (a copy of which goes to sent), its report (ref →
// "" when updated, else why not). Refs already at commit are not sent;
// when none is left, nothing is.
func (m *Mirror) receivePack(s *session, commit *git2go.Oid, refs []writeback.RefUpdate, said *git.Capped, sent *bytes.Buffer) (map[string]string, error) {
	var t git2go.SmartSubtransport = httpTransport{}
	switch {
	case strings.HasPrefix(s.remoteURL, schemeSSH+":"):
		t = &sshTransport{}
	case strings.HasPrefix(s.remoteURL, schemeFile+":"):
		t = &fileTransport{}
	}
	defer t.Free()
	ls, err := t.Action(s.remoteURL, git2go.SmartServiceActionReceivepackLs)
	if err != nil {
		return nil, err
	}
	advertised, caps, err := git.ReadPushAdvertisement(ls)
	if err != nil {
		return nil, s.fail(err)
	}
	if _, ok := caps["report-status"]; !ok {
		return nil, git.ErrNoPushReport
	}
	var cmds []git.PushCommand
	for _, r := range refs {
		old := advertised[r.Dst]
		if old == commit.String() {
			continue
		}
		if old == "" {
			old = git.ZeroID
		} else if !r.Force {
			if err := m.fastForward(commit, old); err != nil {
				return nil, err
			}
		}
		cmds = append(cmds, git.PushCommand{Old: old, New: commit.String(), Ref: r.Dst})
	}
	if len(cmds) == 0 {
		return map[string]string{}, nil
	}
	st, err := t.Action(s.remoteURL, git2go.SmartServiceActionReceivepack)
	if err != nil {
		return nil, err
	}
	if _, err := st.Write(git.PushRequest(cmds, caps)); err != nil {
		return nil, err
	}
	// The HTTP transport holds the body until the first read; SSH sends
	// as it goes.
	if err := m.pack(io.MultiWriter(st, sent), commit, advertised); err != nil {
		return nil, err
	}
	_, sideband := caps["side-band-64k"]
	report, err := git.ReadPushReport(st, sideband, said)
	if err != nil {
		return nil, s.fail(err)
	}
	return report, nil
}

// fastForward returns a *nonFastForwardError unless the server's ref at
// old is commit's ancestor: the checks git push makes before sending.
func (m *Mirror) fastForward(commit *git2go.Oid, old string) error {
	oid, err := git2go.NewOid(old)
	if err != nil {
		return fmt.Errorf("the server advertised a malformed object name %q", old)
	}
	if _, err := m.repo.LookupCommit(oid); err != nil {
		return &nonFastForwardError{"the remote ref has commits that are not present locally: fetch first"}
	}
	ok, err := m.repo.DescendantOf(commit, oid)
	if err != nil {
		return err
	}
	if !ok {
		return &nonFastForwardError{"non-fast-forward: the remote ref is not an ancestor of the commit"}
	}
	return nil
}

// pack writes the pack that gives the server commit to w: no objects when
// the server has it already; what it adds to its parent when the server
// has the parent, read along the paths the commit changed (newObjects);
// else, a case jobs do not make, what libgit2's walk from commit down to
// the server's refs finds.
func (m *Mirror) pack(w io.Writer, commit *git2go.Oid, advertised git.Refs) error {
	tips := map[string]bool{}
	for _, v := range advertised {
		tips[v] = true
	}
	odb, err := m.repo.Odb()
	if err != nil {
		return err
	}
	defer odb.Free()
	if tips[commit.String()] {
		return writePack(w, odb, nil)
	}
	c, err := m.repo.LookupCommit(commit)
	if err != nil {
		return err
	}
	defer c.Free()
	if c.ParentCount() == 1 && tips[c.ParentId(0).String()] {
		parent, err := m.repo.LookupCommit(c.ParentId(0))
		if err != nil {
			return err
		}
		defer parent.Free()
		objs, err := m.newObjects(c.TreeId(), parent.TreeId())
		if err != nil {
			return err
		}
		return writePack(w, odb, append(objs, commit))
	}
	pb, err := m.repo.NewPackbuilder()
	if err != nil {
		return err
	}
	defer pb.Free()
	walk, err := m.repo.Walk()
	if err != nil {
		return err
	}
	defer walk.Free()
	if err := walk.Push(commit); err != nil {
		return err
	}
	for tip := range tips {
		if id, err := git2go.NewOid(tip); err == nil {
			_ = walk.Hide(id) // a tip the mirror lacks hides nothing
		}
	}
	if err := pb.InsertWalk(walk); err != nil {
		return err
	}
	return pb.Write(w)
}

// writePack writes objs as a pack (gitformat-pack(5), version 2) of whole
// objects, compressed for speed: libgit2's pack builder searches deltas
// between the objects it is given, which for a job that changes a hundred
// directories of a thousand files (a hundred 40 KB trees that share
// nothing) took longer than everything else the push does.
func writePack(w io.Writer, odb *git2go.Odb, objs []*git2go.Oid) error {
	sum := sha1.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, sum), 64<<10)
	hdr := []byte("PACK")
	hdr = binary.BigEndian.AppendUint32(hdr, 2)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(objs)))
	_, _ = bw.Write(hdr)
	zw, err := zlib.NewWriterLevel(bw, zlib.BestSpeed)
	if err != nil {
		return err
	}
	for _, id := range objs {
		obj, err := odb.Read(id)
		if err != nil {
			return err
		}
		// The object header: type in bits 4-6 of the first byte, the
		// size in 4 bits, then 7 bits a byte, least significant first.
		data, size := obj.Data(), uint64(obj.Len())
		b := byte(obj.Type())<<4 | byte(size&0x0f)
		var head []byte
		for size >>= 4; size > 0; size >>= 7 {
			head = append(head, b|0x80)
			b = byte(size & 0x7f)
		}
		_, _ = bw.Write(append(head, b))
		zw.Reset(bw)
		_, _ = zw.Write(data)
		err = zw.Close()
		obj.Free()
		if err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err = w.Write(sum.Sum(nil))
	return err
}

// newObjects lists the objects of tree that base lacks, descending only
// where a subtree's id differs: the trees along the changed paths and the
// blobs that changed. A tree is read as git stores it, entries parsed
// here, so a directory of a thousand files costs one read, not a thousand
// calls into libgit2. Submodules' commits are not in the repository and
// not listed.
func (m *Mirror) newObjects(tree, base *git2go.Oid) ([]*git2go.Oid, error) {
	odb, err := m.repo.Odb()
	if err != nil {
		return nil, err
	}
	defer odb.Free()
	var out []*git2go.Oid
	var walk func(tree, base *git2go.Oid) error
	walk = func(tree, base *git2go.Oid) error {
		if base != nil && tree.Equal(base) {
			return nil
		}
		out = append(out, tree)
		entries, err := readTree(odb, tree)
		if err != nil {
			return err
		}
		var old map[string]treeEntry
		if base != nil {
			baseEntries, err := readTree(odb, base)
			if err != nil {
				return err
			}
			old = make(map[string]treeEntry, len(baseEntries))
			for _, e := range baseEntries {
				old[e.name] = e
			}
		}
		for _, e := range entries {
			o, had := old[e.name]
			if had && o.id.Equal(e.id) {
				continue
			}
			switch {
			case e.mode == git2go.FilemodeTree:
				var sub *git2go.Oid
				if had && o.mode == git2go.FilemodeTree {
					sub = o.id
				}
				if err := walk(e.id, sub); err != nil {
					return err
				}
			case e.mode != git2go.FilemodeCommit:
				out = append(out, e.id)
			}
		}
		return nil
	}
	return out, walk(tree, base)
}

// treeEntry is an entry of a tree object.
type treeEntry struct {
	name string
	mode git2go.Filemode
	id   *git2go.Oid
}

const oidSize = len(git2go.Oid{})

// readTree parses a tree object: entries of "<octal mode> <name>\0" and a
// 20-byte object name (SHA-1, all libgit2 1.5 knows).
func readTree(odb *git2go.Odb, id *git2go.Oid) ([]treeEntry, error) {
	obj, err := odb.Read(id)
	if err != nil {
		return nil, err
	}
	defer obj.Free()
	if obj.Type() != git2go.ObjectTree {
		return nil, fmt.Errorf("%s is a %s, not a tree", id, obj.Type())
	}
	data := obj.Data()
	var out []treeEntry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		nul := bytes.IndexByte(data, 0)
		if sp <= 0 || nul < sp || len(data) < nul+1+oidSize {
			return nil, fmt.Errorf("tree %s is malformed", id)
		}
		mode, err := strconv.ParseUint(string(data[:sp]), 8, 32)
		if err != nil {
			return nil, fmt.Errorf("tree %s has a malformed mode: %w", id, err)
		}
		oid := new(git2go.Oid)
		copy(oid[:], data[nul+1:nul+1+oidSize])
		out = append(out, treeEntry{name: string(data[sp+1 : nul]), mode: git2go.Filemode(mode), id: oid})
		data = data[nul+1+oidSize:]
	}
	return out, nil
}

func nonFastForward(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range []string{"non-fast-forward", "non-fastforward", "fetch first", "not present locally"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// remoteSaid keeps the lines of a server's sideband messages that are not
// progress (counters and percentages), joined, at most 512 bytes.
func remoteSaid(text string) string {
	var lines []string
	for _, l := range strings.FieldsFunc(text, func(r rune) bool { return r == '\n' || r == '\r' }) {
		l = strings.TrimSpace(l)
		if l == "" || strings.Contains(l, "%") {
			continue
		}
		lines = append(lines, l)
	}
	out := strings.Join(lines, "; ")
	if len(out) > 512 {
		out = out[:512] + "..."
	}
	return out
}
