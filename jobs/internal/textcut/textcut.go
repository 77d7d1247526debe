// Package textcut bounds strings that came from documents another program
// may have written, before they are stored or exported: valid UTF-8, cut to
// a number of bytes between characters, or quoted where they would not print
// as themselves.
package textcut

import (
	"strings"
	"unicode/utf8"
)

// Bytes is s as valid UTF-8 (each invalid byte run as U+FFFD) of at most n
// bytes, cut between characters.
func Bytes(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
