package docket_test

import (
	"context"
	"errors"
	"testing"

	"github.com/docketq/docket"
	"github.com/docketq/docket/internal/clientengine"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/internal/testdb"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

var errNoRecipient = errors.New("to must not be empty")

// mailArgs check themselves with a value receiver.
type mailArgs struct {
	To string `bson:"to"`
}

func (mailArgs) Kind() string { return "mail" }

func (a mailArgs) Validate() error {
	if a.To == "" {
		return errNoRecipient
	}
	return nil
}

// smsArgs check themselves with a pointer receiver, which the worker
// calls on the args it decodes: an insert of an smsArgs value must too.
type smsArgs struct {
	Phone string `bson:"phone"`
}

func (smsArgs) Kind() string { return "sms" }

func (a *smsArgs) Validate() error {
	if a.Phone == "" {
		return errors.New("phone must not be empty")
	}
	return nil
}

// Args that fail their Validate are refused by every insert path of the
// client, naming the kind and wrapping the Validate error, and a many-insert
// or a workflow with one such job writes nothing.
func TestInsertRefusesArgsThatFailTheirValidate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := docket.NewClient(testdb.NewDB(t), docket.Config{})
	require.NoError(t, err)

	requireRefused := func(err error, kind string, index int) {
		t.Helper()
		var ve *docket.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, index, ve.Index)
		require.ErrorContains(t, err, `"`+kind+`"`, "the error names the kind")
	}
	_, err = c.Insert(ctx, mailArgs{}, nil)
	requireRefused(err, "mail", 0)
	require.ErrorIs(t, err, errNoRecipient, "the Validate error is wrapped")
	require.ErrorContains(t, err, "to must not be empty")

	_, err = c.Insert(ctx, smsArgs{}, nil)
	requireRefused(err, "sms", 0)
	require.ErrorContains(t, err, "phone must not be empty")
	_, err = c.Insert(ctx, &smsArgs{}, nil)
	requireRefused(err, "sms", 0)

	_, err = c.InsertMany(ctx, []docket.InsertManyParams{{Args: mailArgs{To: "a@example.com"}}, {Args: mailArgs{}}})
	requireRefused(err, "mail", 1)
	require.ErrorIs(t, err, errNoRecipient)

	wf := docket.NewWorkflow("wf-invalid")
	first := wf.Add("first", mailArgs{To: "a@example.com"}, nil)
	wf.Add("second", smsArgs{}, &docket.TaskOpts{After: []string{first}})
	_, err = c.InsertWorkflow(ctx, wf)
	requireRefused(err, "sms", 1)

	n, err := store.Of(clientengine.Part[*queue.Client](c)).Collection().CountDocuments(ctx, map[string]any{})
	require.NoError(t, err)
	require.Zero(t, n, "an invalid job is never stored, nor the valid ones inserted with it")

	res, err := c.Insert(ctx, smsArgs{Phone: "+1 555 0100"}, nil)
	require.NoError(t, err)
	require.NotEmpty(t, res.ID)
}
