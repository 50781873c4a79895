package commitmsg

import "testing"

// A trailer joins the message's trailers when its last paragraph is
// trailers alone, else starts the paragraph git reads them from; a
// subject alone or a body that merely has a colon is not taken for one.
func TestAddTrailerJoinsTheLastParagraphOfTrailers(t *testing.T) {
	const id = "Change-Id: I0123"
	for _, c := range []struct{ msg, want string }{
		{"Update app to 2.0.0", "Update app to 2.0.0\n\nChange-Id: I0123\n"},
		{"Update app to 2.0.0\n", "Update app to 2.0.0\n\nChange-Id: I0123\n"},
		{"Subject: with a colon", "Subject: with a colon\n\nChange-Id: I0123\n"},
		{"Update\n\n- app: 1.0 -> 2.0\n", "Update\n\n- app: 1.0 -> 2.0\n\nChange-Id: I0123\n"},
		{"Update\n\nNote: the body says so here.\nsecond line", "Update\n\nNote: the body says so here.\nsecond line\n\nChange-Id: I0123\n"},
		{"Update\n\nbody\n\nSigned-off-by: A <a@example.com>\n\n", "Update\n\nbody\n\nSigned-off-by: A <a@example.com>\nChange-Id: I0123\n"},
	} {
		if got := AddTrailer(c.msg, id); got != c.want {
			t.Errorf("AddTrailer(%q) = %q, want %q", c.msg, got, c.want)
		}
	}
}
