package dockettest_test

import (
	"context"
	"fmt"

	"github.com/docketq/docket"
	"github.com/docketq/docket/dockettest"
	"github.com/docketq/docket/jobs"
)

// Work runs a kind's handler as one attempt would (args checked, the
// kind's timeout), without a started client; RequireInserted then checks
// what the handler inserted. In a test, pass the *testing.T where this
// passes a stand-in.
func ExampleWork() {
	ctx := context.Background()
	client, err := docket.NewClient(exampleDB("dockettest"), docket.Config{})
	if err != nil {
		panic(err)
	}
	docket.MustAddHandler(client, func(ctx context.Context, _ *jobs.Job, a SignUpArgs) error {
		_, err := client.Insert(ctx, WelcomeArgs{To: a.Email}, nil)
		return err
	}, jobs.KindOptions{})

	fmt.Println("bad args:", dockettest.Work(ctx, client, SignUpArgs{Email: "nobody"}))
	fmt.Println("good args:", dockettest.Work(ctx, client, SignUpArgs{Email: "ada@example.com"}))
	job := dockettest.RequireInserted(printingT{}, client, WelcomeArgs{To: "ada@example.com"})
	fmt.Println("inserted:", job.Kind, job.State)
	// Output:
	// bad args: email "nobody" has no @
	// good args: <nil>
	// inserted: welcome available
}
