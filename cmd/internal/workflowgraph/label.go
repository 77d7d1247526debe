package workflowgraph

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/docketq/docket/queue"
)

// labelRunes bounds a node's label; the full name (to titleRunes) is its
// tooltip.
const (
	labelRunes = 16
	titleRunes = 300
)

// Label is s as a drawing shows it: bytes that are not UTF-8 as U+FFFD,
// control characters as their pictures (a new line as ␊), characters that
// reorder text as U+FFFD, and, when longer than n characters, its first n
// followed by "…".
func Label(s string, n int) string {
	var b strings.Builder
	count := 0
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		if count == n {
			b.WriteRune('…')
			break
		}
		b.WriteRune(visible(r))
		count++
	}
	return b.String()
}

// visible is r as a drawing shows it.
func visible(r rune) rune {
	switch {
	case r < 0x20:
		return 0x2400 + r // ␀ to ␟
	case r == 0x7f:
		return '␡'
	case unicode.Is(unicode.Bidi_Control, r), unicode.IsControl(r), r == '\u2028', r == '\u2029':
		return utf8.RuneError
	}
	return r // an invalid byte decodes as utf8.RuneError already
}

// taskName is what names a task in a drawing: its name in its workflow,
// else its kind, else its id.
func taskName(t *queue.WorkflowTask) string {
	switch {
	case t.Name != "":
		return t.Name
	case t.Kind != "":
		return t.Kind
	}
	return t.JobID.String()
}

// summaryLabel is what a summary node says: how many tasks it stands
// for, and in how many layers when it folds several.
func summaryLabel(n Node) string {
	s := Plural(n.More, "more task", "more tasks")
	if n.Layers > 1 {
		s += " in " + Plural(n.Layers, "layer", "layers")
	}
	return s
}

// statesLabel counts a summary's tasks by state: "3 blocked · 2 dead".
func statesLabel(n Node) string {
	parts := make([]string, len(n.States))
	for i, c := range n.States {
		name := string(c.State)
		if name == "" {
			name = "other"
		}
		parts[i] = itoa(c.N) + " " + Label(name, labelRunes)
	}
	return strings.Join(parts, " · ")
}
