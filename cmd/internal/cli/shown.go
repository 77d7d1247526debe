package cli

import (
	"strings"
	"unicode/utf8"

	"github.com/docketq/docket/internal/printable"
)

// shown is s as docketctl and enqueue print it for a person: as it is
// when it is valid UTF-8 of printable characters and spaces, else quoted
// with Go's escapes ("k\x1b[2K", "mail\xff", "a\tb", "\u009b"), so that a
// string another application stored cannot move the cursor, erase a line,
// set the terminal's title or clipboard (ESC and OSC sequences, C1
// controls), add a row of its own (a newline, a carriage return) or shift
// a table's columns (a tab). A string that starts with a quote is quoted
// too, so that a quoted cell always reads as escaped. --json stays exact.
// Every table and text output goes through it.
func shown(s string) string { return printable.Quoted(s) }

// shownLines is shown for a message of several lines (an error listing
// invalid input lines): each line is shown on its own.
func shownLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = shown(l)
	}
	return strings.Join(lines, "\n")
}

// truncate shortens s to at most n characters, ending it with "…" when it
// was longer; it cuts between characters, never inside one.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
