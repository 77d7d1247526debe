package docket

import (
	"errors"
	"testing"
	"time"

	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
)

type valueArgs struct{ Q string }

func (valueArgs) Kind() string                   { return "value" }
func (a valueArgs) InsertOpts() queue.InsertOpts { return queue.InsertOpts{Queue: a.Q, MaxAttempts: 3} }

type pointerArgs struct{}

func (pointerArgs) Kind() string { return "pointer" }
func (*pointerArgs) InsertOpts() queue.InsertOpts {
	return queue.InsertOpts{Priority: 4, Delay: time.Minute}
}
func (*pointerArgs) Validate() error { return errors.New("bad") }

type plainArgs struct{}

func (plainArgs) Kind() string { return "plain" }

func TestInsertOptsForTakesTheArgsDeclaredDefaultsForZeroFields(t *testing.T) {
	at := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		args jobs.Args
		o    queue.InsertOpts
		want queue.InsertOpts
	}{
		{"value receiver", valueArgs{Q: "mail"}, queue.InsertOpts{}, queue.InsertOpts{Queue: "mail", MaxAttempts: 3}},
		{"given fields win", valueArgs{Q: "mail"}, queue.InsertOpts{Queue: "urgent"}, queue.InsertOpts{Queue: "urgent", MaxAttempts: 3}},
		{"pointer receiver, value passed", pointerArgs{}, queue.InsertOpts{}, queue.InsertOpts{Priority: 4, Delay: time.Minute}},
		{"pointer passed", &pointerArgs{}, queue.InsertOpts{}, queue.InsertOpts{Priority: 4, Delay: time.Minute}},
		{"RunAt given keeps the declared Delay out", pointerArgs{}, queue.InsertOpts{RunAt: at}, queue.InsertOpts{Priority: 4, RunAt: at}},
		{"no method", plainArgs{}, queue.InsertOpts{ID: "x"}, queue.InsertOpts{ID: "x"}},
		{"nil", nil, queue.InsertOpts{}, queue.InsertOpts{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, InsertOptsFor(c.args, c.o))
		})
	}
}

func TestValidateArgsFindsAPointerReceiverAndWrapsItsError(t *testing.T) {
	err := validateArgs(2, pointerArgs{})
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, 2, ve.Index)
	require.EqualError(t, err, `queue: job 2: args: "pointer" args fail their Validate: bad`)
	require.NoError(t, validateArgs(0, plainArgs{}))
}
