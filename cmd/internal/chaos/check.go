//go:build linux

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/store"
	"github.com/docketq/docket/jobs"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// runCommand runs bin to completion and returns its output and exit status.
func runCommand(bin string, env []string, stdin string, args ...string) (string, string, int) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		return "", err.Error(), -1
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// logLine is the part of a worker's JSON log line the checks read.
type logLine struct {
	TS      string `json:"ts"`
	Level   string `json:"level"`
	Msg     string `json:"msg"`
	Worker  string `json:"worker"`
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	Outcome string `json:"outcome"`
	// Tree and Version are set on "published a tree".
	Tree    string `json:"tree"`
	Version int64  `json:"version"`
}

func (l logLine) time() time.Time {
	t, _ := time.Parse("2006-01-02T15:04:05.000Z0700", l.TS)
	return t
}

// final reports whether the line records a job's final write.
func (l logLine) final() bool {
	return l.Msg == "job finished" &&
		(l.Outcome == "succeeded" || l.Outcome == "cancelled" || strings.HasPrefix(l.Outcome, "failed, dead"))
}

// unconfirmed says whether the owner logged that it could not record
// attempt j.Attempt's outcome of job id, the outcome the document shows.
func unconfirmed(lines []logLine, id string, j *jobs.Job) bool {
	for _, l := range lines {
		if l.JobID == id && l.Attempt == j.Attempt && strings.HasPrefix(l.Msg, "job finished but its outcome could not be recorded") &&
			(l.Outcome == string(j.State) || strings.HasPrefix(l.Outcome, "failed, "+string(j.State)) || (j.State == jobs.StateCancelled && l.Outcome == "cancelled")) {
			return true
		}
	}
	return false
}

func parseLog(out string) []logLine {
	var lines []logLine
	for _, s := range strings.Split(out, "\n") {
		var l logLine
		if json.Unmarshal([]byte(s), &l) == nil && l.Msg != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// expectedDeath says why job j must end dead, or "" when it must not.
func expectedDeath(j *jobs.Job) string {
	if j.Kind == handlers.LedgerTransferKind {
		if a, _, err := ledgerArgs(j); err == nil && (a.From == ledgerGhost || a.To == ledgerGhost) {
			return fmt.Sprintf("%s: account %q", handlers.ErrLedgerAccount, ledgerGhost)
		}
		return ""
	}
	if j.Kind == handlers.OrderKind {
		var a handlers.OrderArgs
		if bson.Unmarshal(j.Args, &a) == nil && a.Product == orderGhost {
			return fmt.Sprintf("product %q: %s", orderGhost, handlers.ErrUnknownProduct)
		}
		return ""
	}
	if j.Kind != handlers.AddFriendKind {
		return ""
	}
	var a handlers.AddFriendArgs
	if bson.Unmarshal(j.Args, &a) == nil && (strings.HasPrefix(a.UserA, "ghost") || strings.HasPrefix(a.UserB, "ghost")) {
		return handlers.ErrUnknownUser.Error()
	}
	return ""
}

// check runs every check on the drained system.
func (r *run) check() {
	ctx := context.Background()
	var all []jobs.Job
	r.readAll(ctx, "jobs", store.Of(r.q).Collection(), &all)
	byID := map[string]*jobs.Job{}
	for i := range all {
		j := &all[i]
		byID[j.ID] = j
		r.checkJob(j)
	}
	r.checkFencing(byID)
	r.checkMoney()
	r.checkUsers(all)
	r.checkLedger(all)
	r.checkTrees(all)
	r.checkOrders(all)
	r.checkLimit(all)
	r.checkRate(all)
	r.checkPartition(all)
	r.checkWorkflows(byID)
}

// checkJob: every job succeeded, or is dead or cancelled as the run meant.
func (r *run) checkJob(j *jobs.Job) {
	r.res.Jobs++
	r.res.MaxAttempt = max(r.res.MaxAttempt, j.Attempt)
	if j.Attempt > 1 {
		r.res.Retried++
	}
	lastErr := ""
	if len(j.Errors) > 0 {
		lastErr = j.Errors[len(j.Errors)-1].Message
	}
	switch want := expectedDeath(j); {
	case isWorkflowJob(j): // checkWorkflows judges its state
		switch j.State {
		case jobs.StateSucceeded:
			r.res.Succeeded++
		case jobs.StateDead:
			r.res.Dead++
		case jobs.StateCancelled:
			r.res.Cancelled++
		}
	case r.cancelled[j.ID]:
		if j.State != jobs.StateCancelled {
			r.errorf("chaos: job %s was cancelled but is %s", j.ID, j.State)
		}
		r.res.Cancelled++
	case want != "":
		if j.State != jobs.StateDead || !strings.Contains(lastErr, want) {
			r.errorf("chaos: job %s (%s %s) should be dead with %q; it is %s, last error %q", j.ID, j.Kind, j.Args, want, j.State, lastErr)
		}
		r.res.Dead++
	case j.State == jobs.StateSucceeded:
		r.res.Succeeded++
	default:
		r.errorf("chaos: job %s (%s %s) is %s after %d attempts; errors: %+v", j.ID, j.Kind, j.Args, j.State, j.Attempt, j.Errors)
	}
}

// checkFencing: from the workers' logs and the job documents, no write by a
// worker that had lost its lease took effect. Every final write a worker
// logged must be the one the document shows (its owner and attempt), and no
// job was finished twice; a final write nobody logged must be that of a
// worker SIGKILLed before it could log. A worker stalled past its lease
// must have found its leases lost and written nothing for them.
func (r *run) checkFencing(byID map[string]*jobs.Job) {
	killed := map[string]bool{}
	finals := map[string][]logLine{}
	logs := map[string][]logLine{}
	for _, p := range r.procs {
		killed[p.id] = p.killed
		logs[p.id] = parseLog(p.out.String())
		for _, l := range logs[p.id] {
			if l.final() {
				finals[l.JobID] = append(finals[l.JobID], l)
			}
		}
		r.res.OutageLogLines = max(r.res.OutageLogLines, r.outageWarnings(p, logs[p.id]))
	}
	for id, j := range byID {
		f := finals[id]
		switch {
		case len(f) > 1:
			r.errorf("chaos: job %s was finished %d times: %+v", id, len(f), f)
		case len(f) == 1:
			if f[0].Worker != j.Owner || f[0].Attempt != j.Attempt {
				r.errorf("chaos: job %s: worker %s logged finishing attempt %d (%s), but the document shows owner %s, attempt %d, %s",
					id, f[0].Worker, f[0].Attempt, f[0].Outcome, j.Owner, j.Attempt, j.State)
			}
		case j.Owner == "": // never ran: cancelled while queued
		case killed[j.Owner]:
			r.res.UnloggedFinishes++
		case unconfirmed(logs[j.Owner], id, j):
			// Its write was applied, and the worker could not read that
			// back before the lease ran out (a loaded server): it said
			// so, claiming nothing. Not a write after a lost lease.
			r.res.UnloggedFinishes++
		default:
			var said []string
			for _, l := range logs[j.Owner] {
				if l.JobID == id {
					said = append(said, fmt.Sprintf("%s %s (attempt %d) %s", l.TS, l.Msg, l.Attempt, l.Outcome))
				}
			}
			r.errorf("chaos: job %s is %s by %s (attempt %d), yet no worker logged finishing it; %s logged about it: %q",
				id, j.State, j.Owner, j.Attempt, j.Owner, said)
		}
	}
	for _, s := range r.stalls {
		lines := logs[s.p.id]
		for id, held := range s.held {
			j := byID[id]
			if j == nil || (j.Owner == s.p.id && j.Attempt == held.Attempt) {
				continue // not taken from it while it was stopped
			}
			if recordedUntaken(logs, s.p.id, id, held.Attempt) {
				continue // its lease ran out, but no one took the job before its fenced write
			}
			for _, l := range lines {
				if l.JobID == id && l.Attempt == held.Attempt && l.final() {
					r.errorf("chaos: stalled worker %s finished job %s attempt %d after losing its lease", s.p.id, id, held.Attempt)
				}
			}
			if s.p.killed {
				continue // killed since: it may not have got to notice
			}
			started := slices.ContainsFunc(lines, func(l logLine) bool {
				return l.JobID == id && l.Attempt == held.Attempt && l.Msg == "job started"
			})
			if !started {
				// Stopped while its claim's reply was on the way: it never
				// learned that it held the job, so it has nothing to notice
				// (its claim failed on resume; the reaper re-queued the job).
				continue
			}
			endedBefore := slices.ContainsFunc(lines, func(l logLine) bool {
				return l.JobID == id && l.Attempt == held.Attempt && strings.HasPrefix(l.Msg, "job finished") && l.time().Before(s.stopped)
			})
			if endedBefore {
				// Its attempt had ended before the stall (its outcome not
				// recorded: the database was away), and the job was only
				// waiting for the reaper: nothing was running to notice.
				continue
			}
			noticed := slices.ContainsFunc(lines, func(l logLine) bool {
				return l.JobID == id && l.Attempt == held.Attempt && strings.Contains(l.Msg, "lease") && !l.time().Before(s.resume.Add(-time.Second))
			})
			if !noticed {
				var its []string
				for _, l := range lines {
					if l.JobID == id {
						its = append(its, l.TS+" "+l.Msg)
					}
				}
				r.errorf("chaos: stalled worker %s never logged that it lost job %s (attempt %d); stopped %s, resumed %s; its lines of the job: %q",
					s.p.id, id, held.Attempt, s.stopped.Format(time.RFC3339Nano), s.resume.Format(time.RFC3339Nano), its)
			}
		}
	}
}

// outageWarnings counts the warnings and errors p logged while devdb was
// down and in the second after.
func (r *run) outageWarnings(p *process, lines []logLine) int {
	n := 0
	for _, o := range r.outages {
		for _, l := range lines {
			if ts := l.time(); (l.Level == "warn" || l.Level == "error") && !ts.Before(o[0]) && ts.Before(o[1].Add(time.Second)) {
				n++
			}
		}
	}
	return n
}

// checkMoney: money conserved to the cent, each balance its opening plus
// done incoming minus done outgoing, nothing pending, every transaction
// done or cancelled with a reason.
func (r *run) checkMoney() {
	ctx := context.Background()
	var accts []handlers.Account
	r.readAll(ctx, "accounts", r.db.Collection(handlers.AccountsCollection), &accts)
	var txs []struct {
		ID          string           `bson:"_id"`
		Source      any              `bson:"source"`
		Destination any              `bson:"destination"`
		Value       bson.RawValue    `bson:"value"`
		State       handlers.TxState `bson:"state"`
		Reason      string           `bson:"reason"`
	}
	r.readAll(ctx, "transactions", r.db.Collection(handlers.TransactionsCollection), &txs)
	want := map[string]int64{}
	var openingTotal, total int64
	for id, b := range r.openings {
		want[id] = b
		openingTotal += b
	}
	for _, tx := range txs {
		switch tx.State {
		case handlers.TxDone:
			r.res.TxDone++
			v, ok := tx.Value.Int64OK()
			src, _ := tx.Source.(string)
			dst, _ := tx.Destination.(string)
			_, srcOK := r.openings[src]
			_, dstOK := r.openings[dst]
			if !ok || !srcOK || !dstOK || strings.HasPrefix(tx.ID, "bad-tx-") {
				r.errorf("chaos: transaction %s is done but could never apply: %v → %v, %v", tx.ID, tx.Source, tx.Destination, tx.Value)
				continue
			}
			want[src] -= v
			want[dst] += v
		case handlers.TxCancelled:
			r.res.TxCancelled++
			if tx.Reason == "" {
				r.errorf("chaos: transaction %s was cancelled without a reason", tx.ID)
			}
		default:
			r.errorf("chaos: transaction %s is %s", tx.ID, tx.State)
		}
	}
	if len(accts) != len(r.openings) {
		r.errorf("chaos: %d accounts, want %d", len(accts), len(r.openings))
	}
	for _, a := range accts {
		total += a.Balance
		if len(a.PendingTransactions) > 0 {
			r.errorf("chaos: account %s still has pending transactions %v", a.ID, a.PendingTransactions)
		}
		if a.Balance < 0 {
			r.errorf("chaos: account %s is overdrawn: %d", a.ID, a.Balance)
		}
		if a.Balance != want[a.ID] {
			r.errorf("chaos: account %s has %d cents; opening plus done incoming minus done outgoing is %d", a.ID, a.Balance, want[a.ID])
		}
	}
	if total != openingTotal {
		r.errorf("chaos: money was created or destroyed: %d cents, opened with %d", total, openingTotal)
	}
}

// checkUsers: friend lists symmetric, duplicate-free and exactly the pairs
// of the succeeded add-friend jobs; every user named by their last rename
// (by createdAt, then id), every comment carrying its author's current
// name, no syncing flag left.
func (r *run) checkUsers(all []jobs.Job) {
	ctx := context.Background()
	wantFriends := map[string]map[string]bool{}
	wantName := map[string]string{}
	// Renames are ordered by their job's createdAt, then id (see
	// handlers.RenameArgs): the last one enqueued wins.
	type renameKey struct {
		at time.Time
		id string
	}
	lastRename := map[string]renameKey{}
	for i := 1; i <= r.cfg.Users; i++ {
		wantName[fmt.Sprintf("u%d", i)] = fmt.Sprintf("user %d", i)
	}
	for i := range all {
		j := &all[i]
		if j.State != jobs.StateSucceeded {
			continue
		}
		switch j.Kind {
		case handlers.AddFriendKind:
			var a handlers.AddFriendArgs
			if err := bson.Unmarshal(j.Args, &a); err != nil {
				r.errorf("chaos: job %s: %v", j.ID, err)
				continue
			}
			for _, p := range [][2]string{{a.UserA, a.UserB}, {a.UserB, a.UserA}} {
				if wantFriends[p[0]] == nil {
					wantFriends[p[0]] = map[string]bool{}
				}
				wantFriends[p[0]][p[1]] = true
			}
		case handlers.RenameKind:
			var a handlers.RenameArgs
			if err := bson.Unmarshal(j.Args, &a); err != nil {
				r.errorf("chaos: job %s: %v", j.ID, err)
				continue
			}
			last := lastRename[a.UserID]
			if !a.Sync && (j.CreatedAt.After(last.at) || j.CreatedAt.Equal(last.at) && j.ID > last.id) {
				lastRename[a.UserID], wantName[a.UserID] = renameKey{at: j.CreatedAt, id: j.ID}, a.NewName
			}
		}
	}
	var users []struct {
		ID      string   `bson:"_id"`
		Name    string   `bson:"name"`
		Friends []string `bson:"friends"`
		Syncing any      `bson:"syncing"`
	}
	r.readAll(ctx, "users", r.db.Collection(handlers.UsersCollection), &users)
	friends := map[string][]string{}
	names := map[string]string{}
	for _, u := range users {
		friends[u.ID], names[u.ID] = u.Friends, u.Name
		if u.Syncing != nil {
			r.errorf("chaos: user %s is still syncing", u.ID)
		}
		if u.Name != wantName[u.ID] {
			r.errorf("chaos: user %s is named %q; the last rename enqueued (job %s at %s) says %q",
				u.ID, u.Name, lastRename[u.ID].id, lastRename[u.ID].at.Format(time.RFC3339Nano), wantName[u.ID])
		}
	}
	for _, u := range users {
		seen := map[string]bool{}
		for _, f := range u.Friends {
			if seen[f] {
				r.errorf("chaos: user %s has %s twice among their friends", u.ID, f)
			}
			seen[f] = true
			if !slices.Contains(friends[f], u.ID) {
				r.errorf("chaos: %s is a friend of %s, not the reverse", f, u.ID)
			}
			if !wantFriends[u.ID][f] {
				r.errorf("chaos: %s is a friend of %s, but no add-friend job made them so", f, u.ID)
			}
		}
		for f := range wantFriends[u.ID] {
			if !seen[f] {
				r.errorf("chaos: %s should be a friend of %s: an add-friend job succeeded", f, u.ID)
			}
		}
	}
	var comments []struct {
		ID    string `bson:"_id"`
		UID   string `bson:"uid"`
		UName string `bson:"uname"`
	}
	r.readAll(ctx, "comments", r.db.Collection(handlers.CommentsCollection), &comments)
	if len(comments) != r.cfg.Comments {
		r.errorf("chaos: %d comments, seeded %d", len(comments), r.cfg.Comments)
	}
	for _, c := range comments {
		if c.UName != names[c.UID] {
			r.errorf("chaos: comment %s by %s carries the name %q; the user is named %q", c.ID, c.UID, c.UName, names[c.UID])
		}
	}
}

// recordedUntaken reports whether worker w recorded attempt n of job id
// ("job finished": its write, fenced on its lease, applied) before any
// process started a later attempt: a stall past the lease loses the job
// only once the reaper or another claim took it, and where none had, the
// worker's write applies and it has nothing to notice.
func recordedUntaken(logs map[string][]logLine, w, id string, n int) bool {
	i := slices.IndexFunc(logs[w], func(l logLine) bool {
		return l.JobID == id && l.Attempt == n && l.Msg == "job finished"
	})
	if i < 0 {
		return false
	}
	fin := logs[w][i].time()
	for _, lines := range logs {
		if slices.ContainsFunc(lines, func(l logLine) bool {
			return l.JobID == id && l.Attempt > n && l.Msg == "job started" && l.time().Before(fin)
		}) {
			return false
		}
	}
	return true
}
