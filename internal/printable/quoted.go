// Package printable shows strings another program stored where a person
// reads them: in a terminal, a log or a metric label.
package printable

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Quoted is s as it is when it is valid UTF-8 of printable characters and
// spaces (strconv.IsPrint: letters, marks, numbers, punctuation, symbols)
// not starting with a quote, else s quoted with Go's escapes ("mail\xff",
// "k\x1b[2K", "a\tb"): a string another program stored can then neither
// reach a terminal's control sequences nor pass for another one, and a
// quoted value always reads as escaped.
func Quoted(s string) string {
	if printable(s) {
		return s
	}
	return strconv.Quote(s)
}

// printable reports whether s is valid UTF-8 of printable characters and
// spaces, not starting with a quote.
func printable(s string) bool {
	if strings.HasPrefix(s, `"`) {
		return false
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return false
			}
		}
		if r != ' ' && !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}
