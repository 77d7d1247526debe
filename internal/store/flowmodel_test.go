package store_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// flowModel is the reference model of the four kinds of flow control the
// model test sets: a concurrency limit of 2 on kind "l" (a count of the
// slots held), a partition limit of 1 per value of c on kind "pl", a rate
// on kind "r" and a partitioned rate by c on kind "pr" (each GCRA, one
// start at a time: store.ModelRate).
type flowModel struct {
	running map[string]*jobs.Job // by id, with the store that claimed it
	rate    store.ModelRate
	parts   map[string]store.ModelRate // by c
	partR   queue.Rate
}

var (
	modelRate     = queue.Rate{N: 10, Per: time.Second, Burst: 3}
	modelPartRate = queue.Rate{N: 5, Per: time.Second, Burst: 2, By: "c"}
	modelKinds    = []string{"l", "pl", "r", "pr"}
)

// start checks that the model allows j to start at t, and records it.
func (m *flowModel) start(t *testing.T, j *jobs.Job, at time.Time, where string) {
	t.Helper()
	c := j.Args.Lookup("c").String()
	switch j.Kind {
	case "l":
		require.Less(t, m.count(func(r *jobs.Job) bool { return r.Kind == "l" }), 2, "%s: the limit of 2 on l", where)
	case "pl":
		require.Zero(t, m.count(func(r *jobs.Job) bool { return r.Kind == "pl" && r.Args.Lookup("c").String() == c }),
			"%s: the limit of 1 per c on pl (c=%s)", where, c)
	case "r":
		require.Equal(t, 1, m.rate.Reserve(at, 1), "%s: the rate on r allows a start at %s", where, at)
	case "pr":
		p, ok := m.parts[c]
		if !ok {
			p = store.NewModelRate(store.Rate(m.partR))
			m.parts[c] = p
		}
		require.Equal(t, 1, p.Reserve(at, 1), "%s: the rate on pr's partition c=%s allows a start at %s", where, c, at)
	}
	m.running[j.ID] = j
}

func (m *flowModel) count(f func(*jobs.Job) bool) int {
	n := 0
	for _, j := range m.running {
		if f(j) {
			n++
		}
	}
	return n
}

// TestFlowControlMatchesTheModel drives three clients (as three processes,
// each with its own caches) on one clock that only the test moves, by
// random schedules of claims of random kinds and sizes, completions and
// time passing, and checks every job each claim starts against the
// reference model: never over the concurrency limit, the partition
// limit, the rate or a partition's rate, whatever the clients' views.
// And the flow is not stopped: at the end, after a quiet spell, every
// kind with jobs left starts one.
func TestFlowControlMatchesTheModel(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runFlowModel(t, seed) })
	}
}

func runFlowModel(t *testing.T, seed uint64) {
	b := setup(t)
	rng := rand.New(rand.NewPCG(seed, 35))
	require.NoError(t, b.q.SetLimit(b.ctx, queue.KindLimit("l"), 2, ""))
	require.NoError(t, b.q.SetPartitionLimit(b.ctx, queue.KindLimit("pl"), "c", 1, ""))
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("r"), modelRate, ""))
	require.NoError(t, b.q.SetRate(b.ctx, queue.KindLimit("pr"), modelPartRate, ""))
	var ins []queue.Insert
	for _, k := range modelKinds {
		for i := range 12 {
			ins = append(ins, queue.Insert{Kind: k, Args: bson.M{"c": i % 3}})
		}
	}
	_, err := b.q.EnqueueMany(b.ctx, ins)
	require.NoError(t, err)
	clock := &fixedClock{at: time.Now().UTC().Truncate(time.Second).Add(2 * time.Second)}
	var clients []*store.Store
	for range 3 {
		q, err := queue.New(b.db, queue.Config{})
		require.NoError(t, err)
		s := store.Of(q)
		s.SetClock(clock.Now)
		clients = append(clients, s)
	}
	m := &flowModel{running: map[string]*jobs.Job{}, rate: store.NewModelRate(store.Rate(modelRate)),
		parts: map[string]store.ModelRate{}, partR: modelPartRate}
	owners := map[string]*store.Store{}
	for step := range 80 {
		where := fmt.Sprintf("seed %d step %d", seed, step)
		switch r := rng.IntN(10); {
		case r < 3:
			clock.set(clock.Now().Add(time.Duration(rng.IntN(300)) * time.Millisecond))
		case r < 5:
			completeOne(t, b, m, owners, rng)
		default:
			i := rng.IntN(len(clients))
			p := claimAll
			p.Owner = fmt.Sprint("w", i)
			p.Kinds = randomKinds(rng)
			got, err := clients[i].ClaimBatch(b.ctx, p, 1+rng.IntN(4))
			require.NoError(t, err, where)
			for _, j := range got {
				m.start(t, j, clock.Now(), where)
				owners[j.ID] = clients[i]
			}
		}
	}
	// The flow goes on: everything done, a job more of each kind, a quiet
	// spell, then each kind starts a job.
	for len(m.running) > 0 {
		completeOne(t, b, m, owners, rng)
	}
	for _, k := range modelKinds {
		_, err := b.q.Enqueue(b.ctx, k, bson.M{"c": 0}, queue.InsertOpts{})
		require.NoError(t, err)
	}
	clock.set(clock.Now().Add(time.Minute))
	for _, k := range modelKinds {
		p := claimAll
		p.Kinds = []string{k}
		var got []*jobs.Job
		for try := 0; len(got) == 0 && try < 3; try++ { // a view a second old may say full
			got, err = clients[try].ClaimBatch(b.ctx, p, 1)
			require.NoError(t, err)
		}
		require.Len(t, got, 1, "seed %d: %s starts after a quiet spell", seed, k)
	}
}

// randomKinds is one or two of the model's kinds.
func randomKinds(rng *rand.Rand) []string {
	ks := []string{modelKinds[rng.IntN(len(modelKinds))]}
	if k := modelKinds[rng.IntN(len(modelKinds))]; rng.IntN(2) == 0 && !slices.Contains(ks, k) {
		ks = append(ks, k)
	}
	return ks
}

// completeOne completes a running job, if any, by the client that
// claimed it.
func completeOne(t *testing.T, b bundle, m *flowModel, owners map[string]*store.Store, rng *rand.Rand) {
	t.Helper()
	if len(m.running) == 0 {
		return
	}
	ids := make([]string, 0, len(m.running))
	for id := range m.running {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	id := ids[rng.IntN(len(ids))]
	require.NoError(t, owners[id].Complete(b.ctx, store.LeaseOf(m.running[id])))
	delete(m.running, id)
}
