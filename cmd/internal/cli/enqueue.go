package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/docketq/docket"
	"github.com/docketq/docket/configs"
	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/internal/clientengine"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// env is what an enqueue subcommand works with.
type env struct {
	// ctx is bounded by the server timeout (mongo.timeout); base is not,
	// for commands that bound each step themselves.
	ctx    context.Context
	base   context.Context
	cfg    configs.Config
	db     *mongo.Database
	q      *queue.Client
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// progress is whether to draw progress: stderr is a terminal.
	progress bool
}

// input opens the file a --file flag names, stdin for "-"; done closes it.
func (e *env) input(file string) (in io.Reader, done func(), err error) {
	if file == "-" {
		return e.stdin, func() {}, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, badInput("--file: %v", err)
	}
	return f, func() { _ = f.Close() }, nil
}

// subcommand is one `enqueue NAME` command.
type subcommand struct {
	summary string
	// flags registers the subcommand's own flags and returns the function
	// that runs it once they are parsed.
	flags func(fs *flag.FlagSet) func(e *env, args []string) error
}

// subcommands maps names to enqueue's subcommands.
var subcommands = map[string]subcommand{
	"job":      {"enqueue one job of any kind: --kind K --args '{json}'", jobCommand},
	"batch":    {"enqueue many jobs, one JSON object per line, from --file or stdin", batchCommand},
	"workflow": {"enqueue a workflow --id ID: tasks (one JSON object per line, \"after\" naming tasks) that run all or none (docs/WORKFLOWS.md)", workflowCommand},
}

// Enqueue is the main function of the enqueue command; it returns the exit
// status: 0 done, 1 a failure (the database unreachable), 2 bad input, 3 a
// job refused because its queue is full ("queue NAME is full (capacity
// N)").
func Enqueue(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runTool("enqueue", subcommands, "Each prints the ids of the jobs it made, one per line.", args, stdin, stdout, stderr)
}

// toolUsage prints the usage of tool, whose commands are cmds, to w.
func toolUsage(w io.Writer, tool string, cmds map[string]subcommand, note string) {
	fmt.Fprintf(w, "Usage: %s COMMAND [flags]\n\nCommands:\n", tool)
	for _, n := range slices.Sorted(maps.Keys(cmds)) {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintf(w, "\nRun `%s COMMAND --help` for its flags. %s\n", tool, note)
}

// runTool runs the subcommand of tool that args name, and returns the exit
// status: 0 done, 1 a failure (the database unreachable), 2 bad input, 3 a
// job refused by a full queue (and nothing else failed).
func runTool(tool string, cmds map[string]subcommand, note string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// No message shows a password, whatever setting a connection string
	// was given to (stdout is the command's output: left as it is).
	red := configs.NewRedactor(configs.Getenv("DOCKET_MONGO_URI"))
	progress := isTerminal(stderr)
	stderr = red.Writer(stderr)
	usage := func() { toolUsage(stderr, tool, cmds, note) }
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sc, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n", tool, args[0])
		usage()
		return 2
	}
	name := tool + " " + args[0]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	run := sc.flags(fs)
	// The demo kinds' keys may be in the same file: accept them.
	cfg, err := configs.LoadApp(fs, name, args[1:], configs.Getenv, &handlers.Config{})
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	red.Add(cfg.Mongo.URI)
	client, err := connect(cfg.Mongo, nil)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Mongo.Timeout)
	defer cancel()
	db := client.Database(cfg.Mongo.DB)
	// The queue client a docket.Client of this configuration has: it
	// connects nothing and starts nothing.
	dc, err := docket.NewClient(db, cfg.Client)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	q := clientengine.Part[*queue.Client](dc)
	handlers.CancelHooks(q, db) // what cancelling a demo kind's job stops
	e := &env{ctx: ctx, base: context.Background(), cfg: cfg, db: db, q: q, stdin: stdin, stdout: stdout, stderr: stderr,
		progress: progress}
	err = run(e, fs.Args())
	// An error may quote what another application stored: shown, line by
	// line.
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %s\n", name, shownLines(err.Error()))
		return 2
	case errors.Is(err, queue.ErrQueueFull):
		var full *queue.QueueFullError
		if errors.As(err, &full) {
			err = full
		}
		fmt.Fprintf(stderr, "%s: %s\n", name, shownLines(err.Error()))
		return ExitQueueFull
	case serverTimeLimit(err):
		// The driver wraps MaxTimeMSExpired as a deadline: the server did
		// answer, refusing a command that ran past its time limit.
		fmt.Fprintf(stderr, "%s: MongoDB at %s answered that a command ran past its time limit (%s): %s\n", name,
			configs.RedactURI(cfg.Mongo.URI), cfg.Mongo.Timeout, shownLines(configs.Redact(err.Error(), cfg.Mongo.URI)))
		return 1
	case errors.Is(err, context.DeadlineExceeded) || mongo.IsTimeout(err) || mongo.IsNetworkError(err):
		fmt.Fprintf(stderr, "%s: MongoDB at %s did not answer within %s: %s\n", name,
			configs.RedactURI(cfg.Mongo.URI), cfg.Mongo.Timeout, shownLines(configs.Redact(err.Error(), cfg.Mongo.URI)))
		return 1
	default:
		fmt.Fprintf(stderr, "%s: %s\n", name, shownLines(configs.Redact(err.Error(), cfg.Mongo.URI)))
		return 1
	}
}

// serverTimeLimit reports whether err is the server's MaxTimeMSExpired
// (code 50): a reply, not a server that did not answer.
func serverTimeLimit(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(50)
}

// ExitQueueFull is the exit status of an enqueue refused because its queue
// is full.
const ExitQueueFull = 3

// usageError is bad input: exit status 2, nothing written.
type usageError struct{ error }

func badInput(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// insertOptsFlags registers the options every job can take.
func insertOptsFlags(fs *flag.FlagSet, o *queue.InsertOpts) *string {
	fs.StringVar(&o.ID, "id", "", "the job's id (default: a new UUIDv7); a job with this id already there is not added again, so a command that failed can be rerun with the id it printed")
	fs.StringVar(&o.Queue, "queue", "", "queue (default \"default\")")
	fs.IntVar(&o.Priority, "priority", 0, "priority, higher runs first")
	fs.DurationVar(&o.Delay, "delay", 0, "run no sooner than this from now")
	fs.IntVar(&o.MaxAttempts, "max-attempts", 0, "attempts before the job is dead (default 25)")
	fs.StringVar(&o.UniqueKey, "unique-key", "", "while a job with this key is unfinished, return its id instead")
	fs.DurationVar(&o.UniqueFor, "unique-for", 0, "with --unique-key: hold the key for this period (cut on the epoch: 1h from the hour), finished or not, instead of while its job is unfinished")
	fs.Func("after", "ids of jobs, comma-separated (repeatable), that must all succeed before this one runs; one that ends dead or cancelled cancels it (see docs/WORKFLOWS.md)", func(s string) error {
		for _, id := range strings.Split(s, ",") {
			if id = strings.TrimSpace(id); id != "" {
				o.After = append(o.After, id)
			}
		}
		return nil
	})
	fs.BoolVar(&o.AfterRunAnyway, "after-run-anyway", false, "with --after: run once every parent has finished, however it ended")
	return fs.String("run-at", "", "run no sooner than this time (RFC 3339)")
}

func parseRunAt(s string, o *queue.InsertOpts) error {
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return badInput("--run-at: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
	}
	o.RunAt = t
	return nil
}

// parseArgs turns a JSON object (MongoDB extended JSON allowed) into a
// document, naming the problem when it is not one.
func parseArgs(s string) (bson.Raw, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return bson.Raw{5, 0, 0, 0, 0}, nil
	}
	if !strings.HasPrefix(s, "{") {
		return nil, fmt.Errorf("args must be a JSON object, got %.40q", s)
	}
	var doc bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(s), false, &doc); err != nil {
		return nil, fmt.Errorf("args are not valid JSON: %v", err)
	}
	return doc, nil
}

// enqueueAndPrint enqueues ins and prints the ids of the jobs that are in
// the collection, one per line. After a failure it says which jobs are
// not, and with which ids to enqueue them again at most once.
func enqueueAndPrint(e *env, ins []queue.Insert) error {
	for i := range ins {
		ins[i].Opts = withEnvTrace(ins[i].Opts)
	}
	res, err := e.q.EnqueueMany(e.ctx, ins)
	var ve *queue.ValidationError
	if errors.As(err, &ve) {
		return usageError{err}
	}
	for _, r := range res {
		// The id of a job that holds a unique key is another's: shown.
		id := shown(r.ID)
		switch {
		case errors.Is(r.Err, queue.ErrQueueFull):
			var full *queue.QueueFullError
			errors.As(r.Err, &full)
			fmt.Fprintf(e.stderr, "%s: refused: %s\n", id, shown(fmt.Sprint(full)))
			continue
		case r.Err != nil:
			how := "not inserted"
			if errors.Is(r.Err, queue.ErrOutcomeUnknown) {
				how = "not known whether inserted (looking it up failed)"
			}
			fmt.Fprintf(e.stderr, "%s: %s; rerun with --id %s to enqueue it at most once\n", id, how, id)
			continue
		case r.Duplicate:
			fmt.Fprintf(e.stderr, "%s: not added: %s\n", id, duplicateSaid(r))
		case r.Existed:
			fmt.Fprintf(e.stderr, "%s: already there: not added again\n", id)
		}
		fmt.Fprintln(e.stdout, id)
	}
	return err
}

func jobCommand(fs *flag.FlagSet) func(*env, []string) error {
	var in queue.Insert
	fs.StringVar(&in.Kind, "kind", "", "job kind (required)")
	args := fs.String("args", "{}", "args as a JSON object")
	runAt := insertOptsFlags(fs, &in.Opts)
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		if in.Kind == "" {
			return badInput("--kind is required")
		}
		raw, err := parseArgs(*args)
		if err != nil {
			return badInput("--args: %v", err)
		}
		in.Args = raw
		if err := parseRunAt(*runAt, &in.Opts); err != nil {
			return err
		}
		if err := enqueueAndPrint(e, []queue.Insert{in}); err != nil {
			return err
		}
		kinds := enqueued{}
		kinds.add(in.Opts.Queue, in.Kind)
		e.warnUnserved("enqueue job", kinds)
		return nil
	}
}

// duplicateSaid says why a job was not added, its key being held by the
// job r.ID, and whether its args are lost.
func duplicateSaid(r queue.Result) string {
	msg := "a job holds the unique key (for its period, or while unfinished); its id printed"
	if r.ArgsDropped {
		msg += "; its args differ from these, which are in no job"
	}
	return msg
}
