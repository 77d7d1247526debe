package jobs_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/docketq/docket/jobs"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestProgressBoundsWhatItPasses: a fraction outside 0..1 is clamped, NaN
// refused (nothing passed on), a message of invalid UTF-8 repaired and a
// long one cut between characters to the byte limit; outside a handler's
// context Progress says so.
func TestProgressBoundsWhatItPasses(t *testing.T) {
	var got []jobs.ProgressReport
	ctx := jobs.WithProgressReporter(context.Background(), func(p jobs.ProgressReport) { got = append(got, p) })
	long := strings.Repeat("é", jobs.MaxProgressMessageBytes) // 2 bytes each
	for _, tc := range []struct {
		fraction float64
		message  string
		want     float64
		wantMsg  string
	}{
		{0.5, "half", 0.5, "half"},
		{-3, "", 0, ""},
		{7, "x", 1, "x"},
		{math.Inf(1), "", 1, ""},
		{math.Inf(-1), "", 0, ""},
		{0.25, "bad\xffbyte", 0.25, "bad\uFFFDbyte"},
		{1, "a" + long, 1, "a" + long[:jobs.MaxProgressMessageBytes-2]},
	} {
		got = nil
		require.NoError(t, jobs.Progress(ctx, tc.fraction, tc.message))
		require.Len(t, got, 1)
		require.Equal(t, tc.want, got[0].Fraction)
		require.Equal(t, tc.wantMsg, got[0].Message)
		require.LessOrEqual(t, len(got[0].Message), jobs.MaxProgressMessageBytes)
		require.True(t, utf8.ValidString(got[0].Message))
		require.False(t, got[0].At.IsZero())
	}
	got = nil
	require.ErrorIs(t, jobs.Progress(ctx, math.NaN(), "nan"), jobs.ErrProgressNaN)
	require.Empty(t, got)
	require.ErrorIs(t, jobs.Progress(context.Background(), 0.5, ""), jobs.ErrNoProgressHere)
}

// TestProgressReadsAnyStoredValue: a job document whose progress another
// application wrote (of another type, NaN, out of range, huge, invalid
// UTF-8) decodes, its progress unknown or bounded, never an error: a
// claim would otherwise bury the job as malformed.
func TestProgressReadsAnyStoredValue(t *testing.T) {
	huge := strings.Repeat("z", 1<<20)
	for name, tc := range map[string]struct {
		progress any
		known    bool
		message  string
	}{
		"a string":          {"half done", false, ""},
		"a number":          {0.5, false, ""},
		"an array":          {bson.A{1, 2}, false, ""},
		"NaN":               {bson.D{{Key: "fraction", Value: math.NaN()}}, false, ""},
		"out of range":      {bson.D{{Key: "fraction", Value: 1.5}, {Key: "message", Value: "m"}}, false, "m"},
		"an int":            {bson.D{{Key: "fraction", Value: int32(1)}}, true, ""},
		"a string frac":     {bson.D{{Key: "fraction", Value: "0.5"}, {Key: "message", Value: 7}}, false, ""},
		"huge message":      {bson.D{{Key: "fraction", Value: 0.1}, {Key: "message", Value: huge}}, true, huge[:jobs.MaxProgressMessageBytes]},
		"invalid UTF-8":     {bson.D{{Key: "fraction", Value: 0.1}, {Key: "message", Value: "\xff\x1b[2J"}}, true, "\uFFFD\x1b[2J"},
		"a well-formed one": {bson.D{{Key: "fraction", Value: 0.75}, {Key: "message", Value: "copying"}}, true, "copying"},
	} {
		t.Run(name, func(t *testing.T) {
			raw, err := bson.Marshal(bson.D{{Key: "_id", Value: "j"}, {Key: "kind", Value: "k"}, {Key: "progress", Value: tc.progress}})
			require.NoError(t, err)
			var j jobs.Job
			require.NoError(t, bson.Unmarshal(raw, &j))
			require.NotNil(t, j.Progress)
			require.Equal(t, tc.known, j.Progress.Known())
			require.Equal(t, tc.message, j.Progress.Message)
		})
	}
	raw, err := bson.Marshal(bson.D{{Key: "_id", Value: "j"}, {Key: "progress", Value: nil}})
	require.NoError(t, err)
	var j jobs.Job
	require.NoError(t, bson.Unmarshal(raw, &j))
	require.Nil(t, j.Progress, "null is no progress")
}
