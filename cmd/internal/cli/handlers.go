package cli

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func init() {
	subcommands["add-friend"] = subcommand{"make two users friends: --user-a A --user-b B", addFriendCommand}
	subcommands["rename"] = subcommand{"rename a user and sync every copy of the name: --user U --name N", renameCommand}
	subcommands["transfer"] = subcommand{"move money between accounts: --from A --to B --amount CENTS, or --reverse TXID", transferCommand}
	subcommands["seed"] = subcommand{"create demo users, comments and accounts", seedCommand}
}

// validArgs are typed job args that check themselves.
type validArgs interface {
	jobs.Args
	jobs.Validator
}

// argsCommand is a subcommand that enqueues one job of T's kind, with the
// args that bind reads from its flags and the options every job takes.
func argsCommand[T validArgs](bind func(fs *flag.FlagSet, a *T)) func(*flag.FlagSet) func(*env, []string) error {
	return func(fs *flag.FlagSet) func(*env, []string) error {
		var a T
		bind(fs, &a)
		var o queue.InsertOpts
		runAt := insertOptsFlags(fs, &o)
		return func(e *env, rest []string) error {
			if len(rest) > 0 {
				return badInput("unexpected argument %q", rest[0])
			}
			if err := a.Validate(); err != nil {
				return usageError{err}
			}
			if err := parseRunAt(*runAt, &o); err != nil {
				return err
			}
			return enqueueAndPrint(e, []queue.Insert{{Kind: a.Kind(), Args: a, Opts: o}})
		}
	}
}

var addFriendCommand = argsCommand(func(fs *flag.FlagSet, a *handlers.AddFriendArgs) {
	fs.StringVar(&a.UserA, "user-a", "", "one user's id (required)")
	fs.StringVar(&a.UserB, "user-b", "", "the other user's id (required)")
})

var renameCommand = argsCommand(func(fs *flag.FlagSet, a *handlers.RenameArgs) {
	fs.StringVar(&a.UserID, "user", "", "the user's id (required)")
	fs.StringVar(&a.NewName, "name", "", "the new name, 1 to 100 characters (required)")
})

func transferCommand(fs *flag.FlagSet) func(*env, []string) error {
	from := fs.String("from", "", "source account id")
	to := fs.String("to", "", "destination account id")
	amount := fs.Int64("amount", 0, "amount in cents, a positive integer")
	reverse := fs.String("reverse", "", "reverse this done transaction: a new transfer the other way")
	txID := fs.String("tx-id", "", "the transaction's id: a command run again with it makes no second transfer (default: a new id)")
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		var tx, jobID string
		var err error
		if *reverse != "" {
			if *from != "" || *to != "" || *amount != 0 || *txID != "" {
				return badInput("--reverse takes no --from, --to, --amount or --tx-id")
			}
			tx, jobID, err = handlers.EnqueueReverse(e.ctx, e.db, e.q, *reverse)
		} else {
			tx, jobID, err = handlers.EnqueueTransferRequest(e.ctx, e.db, e.q,
				handlers.TransferRequest{TxID: *txID, From: *from, To: *to, Amount: *amount})
		}
		for _, bad := range []error{handlers.ErrInvalidTransfer, handlers.ErrAccountNotFound, handlers.ErrTransactionNotFound,
			handlers.ErrNotReversible, handlers.ErrAlreadyReversed, handlers.ErrTransactionExists} {
			if errors.Is(err, bad) {
				return usageError{err}
			}
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\ttransaction %s\n", shown(jobID), shown(tx))
		return nil
	}
}

// seedCommand writes demo data: users u1..uN with no friends, accounts
// a1..aN with the same opening balance, and comments by random users. Ids
// that exist already are left as they are, so seeding twice adds nothing.
func seedCommand(fs *flag.FlagSet) func(*env, []string) error {
	users := fs.Int("users", 20, "users to create")
	accounts := fs.Int("accounts", 10, "accounts to create")
	balance := fs.Int64("balance", 100_000, "opening balance of each account, in cents")
	comments := fs.Int("comments", 50, "comments to create, by random users")
	seed := fs.Uint64("seed", 1, "random seed for the comments' authors")
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		switch {
		case *users < 0 || *accounts < 0 || *comments < 0:
			return badInput("--users, --accounts and --comments must not be negative")
		case *balance < 0:
			return badInput("--balance: %d must not be negative", *balance)
		case *comments > 0 && *users == 0:
			return badInput("--comments needs at least one user")
		}
		var us, as, cs []any
		for i := 1; i <= *users; i++ {
			us = append(us, bson.D{{Key: "_id", Value: fmt.Sprintf("u%d", i)}, {Key: "name", Value: fmt.Sprintf("user %d", i)}, {Key: "friends", Value: bson.A{}}})
		}
		for i := 1; i <= *accounts; i++ {
			as = append(as, bson.D{{Key: "_id", Value: fmt.Sprintf("a%d", i)}, {Key: "balance", Value: *balance}, {Key: "pendingTransactions", Value: bson.A{}}})
		}
		r := rand.New(rand.NewPCG(*seed, 0))
		for i := 1; i <= *comments; i++ {
			u := r.IntN(*users) + 1
			cs = append(cs, bson.D{{Key: "_id", Value: fmt.Sprintf("c%d", i)}, {Key: "uid", Value: fmt.Sprintf("u%d", u)},
				{Key: "uname", Value: fmt.Sprintf("user %d", u)}, {Key: "text", Value: fmt.Sprintf("comment %d", i)}})
		}
		for _, c := range []struct {
			coll string
			docs []any
		}{{handlers.UsersCollection, us}, {handlers.AccountsCollection, as}, {handlers.CommentsCollection, cs}} {
			n, err := insertNew(e, e.db.Collection(c.coll), c.docs)
			if err != nil {
				return fmt.Errorf("seed %s: %w", c.coll, err)
			}
			fmt.Fprintf(e.stdout, "%s: %d created, %d already there\n", c.coll, n, len(c.docs)-n)
		}
		return handlers.Setup(e.ctx, e.db)
	}
}

// insertNew inserts docs, skipping those whose _id exists; it returns how
// many it inserted.
func insertNew(e *env, coll *mongo.Collection, docs []any) (int, error) {
	if len(docs) == 0 {
		return 0, nil
	}
	res, err := coll.InsertMany(e.ctx, docs, options.InsertMany().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && bwe.WriteConcernError == nil {
		for _, we := range bwe.WriteErrors {
			if we.Code != 11000 {
				return 0, err
			}
		}
		return len(docs) - len(bwe.WriteErrors), nil
	}
	if err != nil {
		return 0, err
	}
	return len(res.InsertedIDs), nil
}
