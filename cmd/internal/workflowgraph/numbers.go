package workflowgraph

import "strconv"

// itoa is n with thousands separated by commas.
func itoa(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// Plural is n, with thousands separated by commas, and the noun that fits
// it: "1 task", "1,200 tasks". The dashboard's captions use it too.
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return itoa(n) + " " + many
}
