package commitmsg

import (
	"regexp"
	"strings"
)

// trailerLine is a line git interpret-trailers reads as a trailer
// ("Signed-off-by: A <a@example.com>").
var trailerLine = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*: \S`)

// AddTrailer adds trailer ("Key: value") to msg's trailers, which git
// and Gerrit read only in the message's last paragraph: to that paragraph
// when it holds trailers alone, else as a paragraph of its own. A
// one-paragraph message is a subject, never trailers. The message ends in
// a newline, as git writes it.
func AddTrailer(msg, trailer string) string {
	msg = strings.TrimRight(msg, "\n")
	paras := strings.Split(msg, "\n\n")
	if last := paras[len(paras)-1]; len(paras) > 1 && allTrailers(last) {
		return msg + "\n" + trailer + "\n"
	}
	return msg + "\n\n" + trailer + "\n"
}

func allTrailers(para string) bool {
	for _, l := range strings.Split(strings.Trim(para, "\n"), "\n") {
		if !trailerLine.MatchString(l) {
			return false
		}
	}
	return true
}
