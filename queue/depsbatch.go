package queue

// Settling many parents at once (step 3 of deps.go, for a worker that has
// finished many jobs with dependents).
//
// A settle costs a handful of commands whatever the number of dependents;
// a worker that finishes jobs faster than one settle at a time settles
// them together, for the commands of one: the succeeded parents with a
// list of their dependents (depslist.go) are settled by one read of the
// parents, then per chunk of dependents the release of those that wait
// for none but these parents, one $pullAll of them from the waitingOn of
// the others, one release of those left waiting for nothing, and last one
// rename of the parents' flags. A succeeded job's success is final (a
// succeeded job that others wait for is not retried), so pulling each of
// them from every dependent listed on any of them pulls only what the
// settle of each would pull. Each write is conditioned as a settle's, and
// safe to repeat. The other parents (ended otherwise, workflows' gates,
// parents without a complete list) are settled one by one.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// SettleDependentsOfAll settles the dependents of each job of ids as
// SettleDependentsOf does, with fewer commands than one call per job, and
// reports what it settled together. Workers call it with the jobs with
// dependents they finished meanwhile; written holds, for some of them,
// the job as its finishing write left it (returned by that write), which
// is not read again. Each settle has a deadline of its own (10 s); a job
// whose settle fails is left due for the leader's pass
// (SettleDependents) and the others are settled still; it returns the
// failures joined.
func (c *Client) SettleDependentsOfAll(ctx context.Context, ids []string, written ...bson.Raw) (SettleReport, error) {
	alone, rep, err := c.settleTogether(ctx, ids, written)
	return rep, errors.Join(append([]error{err}, c.settleEach(ctx, alone)...)...)
}

// SettleReport tells what one SettleDependentsOfAll settled together: the
// succeeded parents, and the distinct dependents they list.
type SettleReport struct {
	Parents, Dependents int
}

// settleTogether reads the jobs of ids still due (but those written
// holds), settles the succeeded ones with a complete list together
// (settleSucceeded), within settleEachTimeout, and returns the others, to
// settle one by one.
func (c *Client) settleTogether(ctx context.Context, ids []string, written []bson.Raw) (alone []any, rep SettleReport, err error) {
	ctx, cancel := context.WithTimeout(ctx, settleEachTimeout)
	defer cancel()
	p := parentsRead{seen: map[string]bool{}, writtenAt: map[string]bson.RawValue{}}
	unread := p.takeWritten(ids, written)
	for _, chunk := range idChunks(bsonA(unread)) {
		// At most one job per id: one batch, and no getMore to learn so.
		cur, err := c.coll.Find(ctx, bson.D{idIn(chunk), isDue},
			options.Find().SetProjection(store.SettleFields).SetLimit(int64(len(chunk))).SetBatchSize(int32(len(chunk))))
		if err == nil {
			err = store.EachRaw(ctx, cur, func(d bson.Raw) error { p.take(d); return nil })
		}
		if err != nil {
			return p.alone, p.rep, fmt.Errorf("queue: read %d jobs to settle their dependents: %w", len(chunk), err)
		}
	}
	if len(p.together) == 0 {
		return p.alone, p.rep, nil
	}
	if err := depsStep(ctx, "settle:read"); err != nil {
		return p.alone, p.rep, err
	}
	p.rep.Parents, p.rep.Dependents = len(p.together), len(p.kids)
	return p.alone, p.rep, c.settleSucceeded(ctx, p.together, p.kids, p.writtenAt)
}

// parentsRead gathers the parents a settle reads (or was given), as
// settleTogether sorts them.
type parentsRead struct {
	alone    []any // to settle one by one
	together []any // succeeded, with a complete list of kids
	kids     bson.A
	seen     map[string]bool // of kids
	rep      SettleReport
	// writtenAt holds the updatedAt of the parents taken, as their
	// completion's reply (takeWritten) or the settle's read left it: the
	// settle's last write is conditioned on it, so that a settle resumed
	// late does not clear the flag that a dependent linked since set
	// again (the link's flag moves updatedAt).
	writtenAt map[string]bson.RawValue
}

// takeWritten takes the documents of written that are of ids and still
// due to their dependents, and returns the ids it leaves to read.
func (p *parentsRead) takeWritten(ids []string, written []bson.Raw) []string {
	given := map[string]bson.Raw{}
	for _, d := range written {
		if id, ok := d.Lookup("_id").StringValueOK(); ok {
			given[id] = d
		}
	}
	var unread []string
	for _, id := range ids {
		d, ok := given[id]
		switch {
		case !ok:
			unread = append(unread, id)
		case d.Lookup(dependentsDueField).Type != 0:
			p.take(d)
		}
	}
	return unread
}

// take sorts the parent d, read with settleTogether's projection.
func (p *parentsRead) take(d bson.Raw) {
	id := d.Lookup("_id")
	listed, ok := listedSuccess(d)
	if !ok {
		p.alone = append(p.alone, id)
		return
	}
	p.together = append(p.together, id)
	if at := d.Lookup("updatedAt"); at.Type == bson.TypeDateTime {
		p.writtenAt[fmt.Sprint(asID(id))] = at
	}
	for _, k := range listed {
		if key := fmt.Sprint(asID(k)); !p.seen[key] {
			p.seen[key] = true
			p.kids = append(p.kids, k)
		}
	}
}

// settleEachTimeout bounds each settle of SettleDependentsOfAll: the read
// and joint settle of the succeeded parents, and the settle of each parent
// settled on its own, a cascade of cancels included.
const settleEachTimeout = 10 * time.Second

// settleEach settles the parents of ids one by one (settleDown), each
// within settleEachTimeout. A parent whose settle fails is left due for
// the leader's pass, and the others are settled still, as settleDue does;
// it returns the failures, and stops only when ctx ends.
func (c *Client) settleEach(ctx context.Context, ids []any) []error {
	var errs []error
	for i, id := range ids {
		if ctx.Err() != nil {
			return append(errs, fmt.Errorf("queue: %d settles not done: %w", len(ids)-i, ctx.Err()))
		}
		one, cancel := context.WithTimeout(ctx, settleEachTimeout)
		_, err := c.settleDown(one, id)
		cancel()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// listedSuccess returns the dependents listed on the job d, read with
// SettleDependentsOfAll's projection, when it is a succeeded job, not a
// workflow's gate, with a complete list (ok).
func listedSuccess(d bson.Raw) (bson.A, bool) {
	st, _ := d.Lookup("state").StringValueOK()
	kind, _ := d.Lookup("kind").StringValueOK()
	if jobs.State(st) != jobs.StateSucceeded || kind == WorkflowGateKind {
		return nil, false
	}
	var out bson.A
	for _, m := range dependentsMatch(d.Lookup("_id"), d) {
		if m.Key != "_id" {
			return nil, false
		}
		out = append(out, m.Value.(bson.D)[0].Value.(bson.A)...)
	}
	return out, true
}

// settleSucceeded settles the succeeded parents, whose lists hold kids,
// with the writes the head of this file lists, in one ordered command
// (each write applied after the one before, as separate commands would
// be: the flags last).
func (c *Client) settleSucceeded(ctx context.Context, parents, kids bson.A, writtenAt map[string]bson.RawValue) error {
	t := c.now()
	lacking := c.srv.ElemMatchNot.Lacking()
	var models []mongo.WriteModel
	for _, chunk := range idChunks(kids) {
		free := releaseLastModel(chunk, parents, t, lacking)
		switch {
		case free == nil:
		case len(parents) == 1 && len(chunk) > lastInBulk:
			// A fan-out's children: released first, alone (lastInBulk).
			all, err := c.releaseLast(ctx, free, len(chunk))
			if err != nil {
				return err
			}
			if err := depsStep(ctx, "settle:last"); err != nil {
				return err
			}
			if all {
				continue
			}
		default:
			// The first write of its chunk: the pull and release
			// after it find nothing left of the kids it released.
			models = append(models, free)
		}
		models = append(models, mongo.NewUpdateManyModel().SetFilter(bson.D{
			idIn(chunk),
			{Key: "state", Value: jobs.StateBlocked},
			{Key: waitingOnField, Value: bson.D{{Key: "$type", Value: "array"}, {Key: "$in", Value: parents}}},
		}).SetUpdate(bson.D{
			{Key: "$pullAll", Value: bson.D{{Key: waitingOnField, Value: parents}}},
			{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: t}}},
		}), releaseModel(idIn(chunk), t))
	}
	var read bson.A
	var ats []settledAt
	for _, p := range parents {
		if at, ok := writtenAt[fmt.Sprint(asID(p))]; ok {
			ats = append(ats, settledAt{p, at})
		} else {
			read = append(read, p)
		}
	}
	models = append(models, settledModels(ats)...)
	for _, chunk := range idChunks(read) {
		models = append(models, mongo.NewUpdateManyModel().SetFilter(bson.D{
			idIn(chunk), {Key: "state", Value: jobs.StateSucceeded}, isDue,
		}).SetUpdate(settledUpdate))
	}
	_, err := c.coll.BulkWrite(ctx, models)
	if len(parents) > 1 && !lacking && c.srv.ElemMatchNot.Detect(err) {
		// Refused (at the first blocked dependent the release met; the
		// writes of earlier chunks may have applied, and repeat as
		// no-ops): the settle again, without that release.
		return c.settleSucceeded(ctx, parents, kids, writtenAt)
	}
	if err != nil {
		return fmt.Errorf("queue: settle the dependents of %d jobs: %w", len(parents), err)
	}
	return depsStep(ctx, "settle:done")
}

// lastInBulk is the most dependents of one succeeded parent whose release
// (releaseLastModel) rides in the settle's command: a few, whose pull and
// release after it cost little when the release took them all. More (a
// fan-out's children, most waiting for this parent only) are released
// first, alone, so that when that was all of them the pull and release
// are not sent at all.
const lastInBulk = 16

// releaseLastModel makes available the blocked jobs of kids that wait for
// no job but the succeeded parents: a chain's next task, a fan-out's
// children (waiting for the one parent alone), a graph's tasks whose
// parents ended together (each entry of their waitingOn one of the
// parents). One write each, where a pull and then a release would be two.
// It is nil for several parents when the server is lacking the $not
// inside $elemMatch that selects them (Server.ElemMatchNot).
func releaseLastModel(kids, parents bson.A, t time.Time, lacking bool) *mongo.UpdateManyModel {
	waiting := bson.D{{Key: "$size", Value: 1}, {Key: "$in", Value: parents}}
	if len(parents) > 1 {
		if lacking {
			return nil
		}
		// No entry that is not one of the parents (an empty list too:
		// the release after the pull would make it available).
		waiting = bson.D{{Key: "$type", Value: "array"}, {Key: "$not", Value: bson.D{{Key: "$elemMatch", Value: bson.D{
			{Key: "$not", Value: bson.D{{Key: "$in", Value: parents}}},
		}}}}}
	}
	return mongo.NewUpdateManyModel().SetFilter(bson.D{
		idIn(kids),
		{Key: "state", Value: jobs.StateBlocked},
		{Key: waitingOnField, Value: waiting},
	}).SetUpdate(bson.D{
		{Key: "$set", Value: bson.D{{Key: "state", Value: jobs.StateAvailable}, {Key: waitingOnField, Value: bson.A{}}, {Key: "updatedAt", Value: t}}},
		{Key: "$unset", Value: bson.D{{Key: linkingField, Value: ""}}},
	})
}

// releaseLast sends the release m of n kids (releaseLastModel) as a
// command of its own. all says it released every one of them: nothing is
// left to pull.
func (c *Client) releaseLast(ctx context.Context, m *mongo.UpdateManyModel, n int) (all bool, err error) {
	r, err := c.coll.UpdateMany(ctx, m.Filter, m.Update)
	if err != nil {
		return false, fmt.Errorf("queue: make ready the jobs whose last parent succeeded: %w", err)
	}
	return r.MatchedCount == int64(n), nil
}

// ClaimNext claims for p the one dependent listed on the job written (as
// its completion left it: store.CompleteReading) as it releases it, when
// the job succeeded and that dependent waits for it alone: a chain's next
// task, which the worker that ran its parent then runs, without the
// settle's release and a claim (store.ClaimReleased). It returns nil when
// the job lists other than one dependent, or its outcome is no longer due
// as written, or the dependent no longer matches, or flow control applies
// to p: the caller settles the job as usual. Otherwise the caller marks
// the job settled (MarkSettled) once it has started the dependent. After
// an error the dependent may be claimed under p.Token: the caller gives it
// back (store.ReleaseClaim), then settles the job as usual.
func (c *Client) ClaimNext(ctx context.Context, written bson.Raw, p store.ClaimParams) (*jobs.Job, error) {
	kid, ok := OnlyDependent(written)
	if !ok {
		return nil, nil
	}
	waiting := bson.D{{Key: waitingOnField, Value: bson.D{
		{Key: "$type", Value: "array"}, {Key: "$size", Value: 1}, {Key: "$in", Value: bson.A{written.Lookup("_id")}},
	}}}
	j, err := c.st.ClaimReleased(ctx, p, kid, waiting,
		bson.D{{Key: waitingOnField, Value: bson.A{}}}, bson.D{{Key: linkingField, Value: ""}})
	if err != nil {
		return nil, fmt.Errorf("queue: claim the next of job %v: %w", asID(written.Lookup("_id")), err)
	}
	return j, nil
}

// OnlyDependent returns the id of the one dependent listed on the job
// written (as its completion left it), when it succeeded, its outcome is
// due, and it lists one dependent, whose id is a string: what ClaimNext
// may take.
func OnlyDependent(written bson.Raw) (string, bool) {
	listed, ok := listedSuccess(written)
	if !ok || len(listed) != 1 || written.Lookup(dependentsDueField).Type == 0 {
		return "", false
	}
	kid, ok := asID(listed[0]).(string)
	return kid, ok
}

// MarkSettled marks the jobs written (as their completions left them)
// settled, the one dependent of each claimed by ClaimNext, in one
// command: the last write of a settle (settledModels). A job that this
// fails for, or that changed since, is left due, and the leader's pass
// settles it.
func (c *Client) MarkSettled(ctx context.Context, written ...bson.Raw) error {
	ats := make([]settledAt, len(written))
	for i, d := range written {
		ats[i] = settledAt{d.Lookup("_id"), d.Lookup("updatedAt")}
	}
	models := settledModels(ats)
	if _, err := c.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("queue: mark the dependents of %d jobs settled: %w", len(written), err)
	}
	return depsStep(ctx, "settle:done")
}

// settledAt is a succeeded job's id and the updatedAt its completion
// wrote.
type settledAt struct {
	id any
	at bson.RawValue
}

// settledModels marks the jobs of ats settled: each while it is still due
// to its dependents and unchanged since its completion wrote its
// updatedAt (a dependent linked since moves it: its settle is then left
// to the next pass). Jobs completed by one write share their updatedAt,
// so one write per distinct updatedAt (an updateMany, as the settle's
// models before it: the driver sends a run of one kind of model in one
// command), chunked as any list of ids.
func settledModels(ats []settledAt) []mongo.WriteModel {
	var order []bson.RawValue
	byAt := map[string]bson.A{}
	for _, a := range ats {
		k := string(a.at.Type) + string(a.at.Value)
		if _, ok := byAt[k]; !ok {
			order = append(order, a.at)
		}
		byAt[k] = append(byAt[k], a.id)
	}
	var models []mongo.WriteModel
	for _, at := range order {
		for _, chunk := range idChunks(byAt[string(at.Type)+string(at.Value)]) {
			models = append(models, mongo.NewUpdateManyModel().SetFilter(bson.D{
				idIn(chunk), {Key: "state", Value: jobs.StateSucceeded},
				isDue, {Key: "updatedAt", Value: at},
			}).SetUpdate(settledUpdate))
		}
	}
	return models
}

// settledUpdate marks a job's dependents settled: the last write of a
// settle.
var settledUpdate = bson.D{{Key: "$rename", Value: bson.D{{Key: dependentsDueField, Value: dependentsField}}}}
