package jobs_test

import (
	"context"
	"fmt"

	"github.com/docketq/docket/jobs"
)

// A handler reports how far it has got; the worker's lease renewals write
// the latest report into the job's progress field. Here a test's context
// receives the reports instead.
func ExampleProgress() {
	copyFiles := func(ctx context.Context, files []string) error {
		for i, f := range files {
			_ = jobs.Progress(ctx, float64(i)/float64(len(files)), "copying "+f)
		}
		return jobs.Progress(ctx, 1, "done")
	}
	ctx := jobs.WithProgressReporter(context.Background(), func(p jobs.ProgressReport) {
		fmt.Printf("%d%% %s\n", p.Percent(), p.Message)
	})
	_ = copyFiles(ctx, []string{"a.csv", "b.csv", "c.csv", "d.csv"})
	// Output:
	// 0% copying a.csv
	// 25% copying b.csv
	// 50% copying c.csv
	// 75% copying d.csv
	// 100% done
}
