package textcut_test

import (
	"testing"
	"unicode/utf8"

	"github.com/docketq/docket/jobs/internal/textcut"
	"github.com/stretchr/testify/require"
)

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"short", "abc", 5, "abc"},
		{"exact", "abcde", 5, "abcde"},
		{"cut", "abcdef", 5, "abcde"},
		{"between characters", "aé€", 4, "aé"},
		{"invalid", "a\xffb", 10, "a\uFFFDb"},
		{"invalid then cut", "\xff\xffab", 3, "\uFFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := textcut.Bytes(tc.in, tc.n)
			require.Equal(t, tc.want, got)
			require.True(t, utf8.ValidString(got))
			require.LessOrEqual(t, len(got), tc.n)
		})
	}
}
