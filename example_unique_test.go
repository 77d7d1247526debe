package docket_test

import (
	"context"
	"fmt"
	"time"

	"github.com/docketq/docket"
)

// A unique key held over a period (River's ByPeriod, asynq's Unique): only
// the first job with the key inserted in the period is added, whether or
// not it has finished since; the result says when an insert's args were
// dropped because another job held the key.
func ExampleInsertOpts_uniqueFor() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("unique_for"), docket.Config{})
	if err != nil {
		panic(err)
	}
	opts := &docket.InsertOpts{UniqueKey: "digest:ada", UniqueFor: 24 * time.Hour}
	first, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, opts)
	if err != nil {
		panic(err)
	}
	fmt.Println("first: duplicate", first.Duplicate)

	// Finished or not, the key holds until the day (UTC) is over.
	if _, err := client.JobCancel(ctx, first.JobID()); err != nil {
		panic(err)
	}
	same, err := client.Insert(ctx, GreetArgs{Name: "Ada"}, opts)
	if err != nil {
		panic(err)
	}
	fmt.Println("same args: duplicate", same.Duplicate, "of the first", same.ID == first.ID, "args dropped", same.ArgsDropped)
	other, err := client.Insert(ctx, GreetArgs{Name: "Ada Lovelace"}, opts)
	if err != nil {
		panic(err)
	}
	fmt.Println("other args: duplicate", other.Duplicate, "args dropped", other.ArgsDropped)
	// Output:
	// first: duplicate false
	// same args: duplicate true of the first true args dropped false
	// other args: duplicate true args dropped true
}
