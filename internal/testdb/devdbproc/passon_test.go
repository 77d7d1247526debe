package devdbproc

import "testing"

// TestPassOn: devdb's warnings and errors, and a line that is not one of
// its JSON log lines (a panic's message and stack), reach the test's
// stderr; its info and debug lines do not.
func TestPassOn(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{`{"level":"warn","msg":"devdb injected a fault"}` + "\n", true},
		{`{"level":"error","msg":"x"}` + "\n", true},
		{`{"level":"info","msg":"interleave: pause between documents"}` + "\n", false},
		{`{"level":"debug","msg":"x"}` + "\n", false},
		{"panic: runtime error: index out of range [3] with length 3\n", true},
		{"goroutine 1 [running]:\n", true},
		{"fatal error: concurrent map writes\n", true},
	} {
		if got := passOn(tc.line); got != tc.want {
			t.Errorf("passOn(%q) = %t, want %t", tc.line, got, tc.want)
		}
	}
}
