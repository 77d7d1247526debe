package printable_test

import (
	"testing"

	"github.com/docketq/docket/internal/printable"
	"github.com/stretchr/testify/require"
)

func TestQuoted(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mail", "mail"},
		{"a b, é €", "a b, é €"},
		{"U+FFFD as such: \uFFFD", "U+FFFD as such: \uFFFD"},
		{"", ""},
		{"mail\xff", `"mail\xff"`},
		{"k\x1b[2K", `"k\x1b[2K"`},
		{"a\tb", `"a\tb"`},
		{"a\nb", `"a\nb"`},
		{"\u009b", `"\u009b"`},
		{`"quoted"`, `"\"quoted\""`},
	} {
		require.Equal(t, tc.want, printable.Quoted(tc.in), "%q", tc.in)
	}
}
