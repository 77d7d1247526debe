package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docketq/docket/queue"
	"github.com/google/uuid"
)

// maxLineBytes bounds one line of batch input.
const maxLineBytes = 4 << 20

// maxReportedErrors is how many invalid lines a batch names before it
// only counts the rest.
const maxReportedErrors = 10

// batchLine is one line of `enqueue batch` input.
type batchLine struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	Args        json.RawMessage `json:"args"`
	Queue       string          `json:"queue"`
	Priority    int             `json:"priority"`
	Delay       string          `json:"delay"`
	RunAt       string          `json:"runAt"`
	MaxAttempts int             `json:"maxAttempts"`
	UniqueKey   string          `json:"uniqueKey"`
	UniqueFor   string          `json:"uniqueFor"`
	// After names the jobs this one waits for: enqueued already, or on
	// earlier lines.
	After          []string `json:"after"`
	AfterRunAnyway bool     `json:"afterRunAnyway"`
}

func batchCommand(fs *flag.FlagSet) func(*env, []string) error {
	file := fs.String("file", "-", "file of JSON lines, - for stdin; each line: {\"id\", \"kind\": K, \"args\": {...}, \"queue\", \"priority\", \"delay\", \"runAt\", \"maxAttempts\", \"uniqueKey\", \"uniqueFor\": \"1h\", \"after\": [ids of jobs enqueued already or on earlier lines], \"afterRunAnyway\"}")
	batchID := fs.String("batch-id", "", "the id of this batch, a UUID; a line without an \"id\" gets one derived from it and the line's number, so a rerun of the same input with the --batch-id a failed run printed inserts only what is missing (default: a new one)")
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		batch, err := parseBatchID(*batchID)
		if err != nil {
			return err
		}
		src, err := openBatch(e, *file)
		if err != nil {
			return err
		}
		defer src.close()
		kinds := enqueued{}
		n, err := validateBatch(src.first(), batch, kinds)
		if err != nil {
			return err
		}
		if n == 0 {
			return badInput("no jobs in the input")
		}
		second, err := src.second()
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(e.base, os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := insertBatch(ctx, e, second, batch, n); err != nil {
			return err
		}
		e.warnUnserved("enqueue batch", kinds)
		return nil
	}
}

func parseBatchID(s string) (uuid.UUID, error) {
	if s == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return uuid.UUID{}, fmt.Errorf("new batch id: %w", err)
		}
		return u, nil
	}
	u, err := uuid.Parse(s)
	if err != nil {
		return uuid.UUID{}, badInput("--batch-id: %q is not a UUID (use the one a failed run printed)", s)
	}
	return u, nil
}

// lineID is the id of the job of line n of batch when the line carries none:
// a UUIDv7 with the batch's time and 42 of its random bits, and n in the
// last 32 bits, so that the jobs of a batch sort by time, then line.
func lineID(batch uuid.UUID, n int) string {
	var id uuid.UUID
	copy(id[:12], batch[:12])
	id[6] = 0x70 | id[6]&0x0f // version 7
	id[8] = 0x80 | id[8]&0x3f // RFC 4122 variant
	binary.BigEndian.PutUint32(id[12:], uint32(n))
	return id.String()
}

// batchSource reads the input twice: once to validate it, once to insert
// it. A regular file is read again (and must not change in between); stdin
// and pipes are copied to a temporary file as they are validated.
type batchSource struct {
	f     *os.File // the file read the second time
	spool *bufio.Writer
	in    io.Reader // what the first pass reads
	stat  os.FileInfo
	temp  string
}

func openBatch(e *env, name string) (*batchSource, error) {
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, badInput("--file: %v", err)
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, badInput("--file: %v", err)
		}
		if st.Mode().IsRegular() {
			return &batchSource{f: f, in: f, stat: st}, nil
		}
		s, err := spooled(f)
		if err != nil {
			_ = f.Close()
		}
		return s, err
	}
	return spooled(e.stdin)
}

// spooled reads r once, copying it to a temporary file for the second pass.
func spooled(r io.Reader) (*batchSource, error) {
	tmp, err := os.CreateTemp("", "docket-batch-*.jsonl")
	if err != nil {
		return nil, fmt.Errorf("a temporary copy of the input: %w", err)
	}
	w := bufio.NewWriterSize(tmp, 256<<10)
	return &batchSource{f: tmp, spool: w, in: io.TeeReader(r, w), temp: tmp.Name()}, nil
}

func (s *batchSource) first() io.Reader { return s.in }

// second returns the input again, from its start.
func (s *batchSource) second() (io.Reader, error) {
	if s.spool != nil {
		if err := s.spool.Flush(); err != nil {
			return nil, fmt.Errorf("a temporary copy of the input: %w", err)
		}
	} else {
		st, err := s.f.Stat()
		if err != nil {
			return nil, badInput("--file: %v", err)
		}
		if st.Size() != s.stat.Size() || !st.ModTime().Equal(s.stat.ModTime()) {
			return nil, badInput("--file changed while it was validated; nothing was written")
		}
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read the input again: %w", err)
	}
	return s.f, nil
}

func (s *batchSource) close() {
	_ = s.f.Close()
	if s.temp != "" {
		_ = os.Remove(s.temp)
	}
}

// lineScanner reads JSON lines, skipping blank lines and # comments.
type lineScanner struct {
	sc   *bufio.Scanner
	n    int // the current line's number
	line []byte
}

func newLineScanner(r io.Reader) *lineScanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	return &lineScanner{sc: sc}
}

func (l *lineScanner) next() bool {
	for l.sc.Scan() {
		l.n++
		l.line = bytes.TrimSpace(l.sc.Bytes())
		if len(l.line) > 0 && l.line[0] != '#' {
			return true
		}
	}
	return false
}

func (l *lineScanner) err() error {
	err := l.sc.Err()
	if errors.Is(err, bufio.ErrTooLong) {
		return badInput("line %d: longer than %d bytes", l.n+1, maxLineBytes)
	}
	if err != nil {
		return badInput("reading input: %v", err)
	}
	return nil
}

// parseLine turns one line into the job it enqueues, with its id: the
// line's own, or the one derived from batch and its number.
func parseLine(line []byte, n int, batch uuid.UUID) (queue.Insert, error) {
	var bl batchLine
	if err := decodeLine(line, &bl); err != nil {
		return queue.Insert{}, fmt.Errorf("line %d: %v", n, err)
	}
	if bl.Kind == "" {
		return queue.Insert{}, fmt.Errorf("line %d: kind: must not be empty", n)
	}
	args, err := parseArgs(string(bl.Args))
	if err != nil {
		return queue.Insert{}, fmt.Errorf("line %d: %v", n, err)
	}
	in := queue.Insert{Kind: bl.Kind, Args: args, Opts: queue.InsertOpts{
		ID: bl.ID, Queue: bl.Queue, Priority: bl.Priority, MaxAttempts: bl.MaxAttempts, UniqueKey: bl.UniqueKey,
		After: bl.After, AfterRunAnyway: bl.AfterRunAnyway,
	}}
	if in.Opts.ID == "" {
		in.Opts.ID = lineID(batch, n)
	}
	in.Opts = withEnvTrace(in.Opts)
	if bl.UniqueFor != "" {
		if in.Opts.UniqueFor, err = time.ParseDuration(bl.UniqueFor); err != nil {
			return queue.Insert{}, fmt.Errorf("line %d: uniqueFor: %q is not a duration such as 1h", n, bl.UniqueFor)
		}
	}
	if bl.Delay != "" {
		if in.Opts.Delay, err = time.ParseDuration(bl.Delay); err != nil {
			return queue.Insert{}, fmt.Errorf("line %d: delay: %q is not a duration such as 30s", n, bl.Delay)
		}
	}
	if err := parseRunAt(bl.RunAt, &in.Opts); err != nil {
		return queue.Insert{}, fmt.Errorf("line %d: runAt: %q is not an RFC 3339 time", n, bl.RunAt)
	}
	return in, nil
}

// validateBatch reads every line and checks it as an enqueue would, in
// flat memory, counts the valid lines' jobs in kinds, and returns the
// number of jobs. Its error names up to maxReportedErrors invalid lines,
// and counts the others.
func validateBatch(r io.Reader, batch uuid.UUID, kinds enqueued) (int, error) {
	sc := newLineScanner(r)
	var problems []string
	bad := 0
	ids := map[[16]byte]int{} // the lines' own ids, hashed, to their line
	jobs := 0
	t := time.Now()
	for sc.next() {
		jobs++
		in, err := parseLine(sc.line, sc.n, batch)
		if err == nil {
			_, err = queue.NewJob(in, t)
			var ve *queue.ValidationError
			if errors.As(err, &ve) {
				err = fmt.Errorf("line %d: %s: %s", sc.n, ve.Field, ve.Reason)
			}
		}
		if err == nil && in.Opts.ID != lineID(batch, sc.n) {
			h := sha256.Sum256([]byte(in.Opts.ID))
			var k [16]byte
			copy(k[:], h[:16])
			if first, dup := ids[k]; dup {
				err = fmt.Errorf("line %d: id: %q is also the id of line %d", sc.n, in.Opts.ID, first)
			} else {
				ids[k] = sc.n
			}
		}
		if err == nil {
			kinds.add(in.Opts.Queue, in.Kind)
		} else {
			bad++
			if len(problems) < maxReportedErrors {
				problems = append(problems, err.Error())
			}
		}
	}
	if err := sc.err(); err != nil {
		return 0, err
	}
	if bad == 0 {
		return jobs, nil
	}
	msg := strings.Join(problems, "\n")
	if bad > len(problems) {
		msg += fmt.Sprintf("\n... and %d more invalid lines", bad-len(problems))
	}
	return 0, badInput("%s\n%d of %d lines invalid; nothing was written", msg, bad, jobs)
}

// batchReport counts what a batch did, line by line.
type batchReport struct {
	inserted, existed, held int
	argsDropped             int   // of held, those whose args differ from the holder's
	notInserted             []int // line numbers
	unknown                 []int
	refused                 []int // their queue was full
	full                    *queue.QueueFullError
}

func (r *batchReport) done() int {
	return r.inserted + r.existed + r.held + len(r.notInserted) + len(r.unknown) + len(r.refused)
}

// insertBatch inserts the jobs of r, validated, in chunks of at most
// queue.ChunkJobs jobs and queue.ChunkBytes of input, each on a context
// bounded by the server timeout, printing the ids of the jobs that are in
// the collection as it goes and, at the end, what it did.
func insertBatch(ctx context.Context, e *env, r io.Reader, batch uuid.UUID, total int) error {
	// The first enqueue of a client sets up the jobs indexes, which can
	// take long on a large collection: give it a budget of its own, so
	// that the first chunk gets all of its own.
	ictx, cancel := context.WithTimeout(ctx, e.cfg.Mongo.Timeout)
	err := e.q.EnsureIndexes(ictx)
	cancel()
	if errors.Is(err, queue.ErrSetupRefused) {
		fmt.Fprintf(e.stderr, "enqueue batch: warning: %v\n", err)
	} else if err != nil {
		return fmt.Errorf("set up the jobs indexes (nothing was written): %w", err)
	}
	b := &batchInserter{ctx: ctx, e: e, out: bufio.NewWriterSize(e.stdout, 64<<10), prog: newProgress(e.stderr, e.progress, total)}
	defer b.out.Flush()
	sc := newLineScanner(r)
	for sc.next() {
		b.add(sc.line, sc.n, batch)
	}
	if err := sc.err(); err != nil && b.failure == nil {
		b.failure = err
	}
	b.flush()
	b.prog.clear()
	_ = b.out.Flush()
	e.reportBatch(b.rep, batch, b.failure)
	if b.failure == nil && b.rep.full != nil {
		return fmt.Errorf("%d jobs refused: %w", len(b.rep.refused), b.rep.full)
	}
	return b.failure
}

// batchInserter sends a batch's lines in chunks, and keeps the report.
// After a failure, the lines that follow are reported not inserted.
type batchInserter struct {
	ctx     context.Context
	e       *env
	out     *bufio.Writer // the ids, one per line
	prog    *progress
	rep     batchReport
	failure error
	ins     []queue.Insert // the chunk, and its input lines
	lines   []int
	size    int
}

// add adds line n to the chunk, sending the chunk first when it is full.
func (b *batchInserter) add(line []byte, n int, batch uuid.UUID) {
	if b.failure != nil {
		b.rep.notInserted = append(b.rep.notInserted, n)
		return
	}
	in, err := parseLine(line, n, batch)
	if err != nil {
		b.failure = fmt.Errorf("%v (the input changed after it was validated)", err)
		b.rep.notInserted = append(b.rep.notInserted, n)
		return
	}
	if len(b.ins) > 0 && (len(b.ins) == queue.ChunkJobs || b.size+len(line) > queue.ChunkBytes) {
		b.flush()
		if b.failure != nil {
			b.rep.notInserted = append(b.rep.notInserted, n)
			return
		}
	}
	b.ins = append(b.ins, in)
	b.lines = append(b.lines, n)
	b.size += len(line)
}

// flush sends the chunk, unless a failure came before or the batch was
// interrupted.
func (b *batchInserter) flush() {
	if len(b.ins) == 0 || b.failure != nil {
		return
	}
	if err := b.ctx.Err(); err != nil { // interrupted: send nothing more
		b.failure = fmt.Errorf("interrupted: %w", err)
		b.rep.notInserted = append(b.rep.notInserted, b.lines...)
		return
	}
	defer func() {
		b.prog.update(b.rep.done())
		b.ins, b.lines, b.size = b.ins[:0], b.lines[:0], 0
	}()
	cctx, cancel := context.WithTimeout(b.ctx, b.e.cfg.Mongo.Timeout)
	res, err := b.e.q.EnqueueMany(cctx, b.ins)
	cancel()
	var ve *queue.ValidationError
	switch {
	case errors.As(err, &ve):
		b.failure = fmt.Errorf("line %d: %s: %s (the input changed after it was validated)", b.lines[ve.Index], ve.Field, ve.Reason)
		b.rep.notInserted = append(b.rep.notInserted, b.lines...)
	case len(res) == 0 && err != nil:
		// Refused before any write (the unique key index is missing).
		b.failure = err
		b.rep.notInserted = append(b.rep.notInserted, b.lines...)
	default:
		b.failure = err
		var ee *queue.EnqueueError
		if errors.As(err, &ee) && ee.NotInserted == 0 && ee.Unknown == 0 {
			// Only jobs refused by a full queue: the others are in, and
			// the next chunks go on.
			b.failure = nil
		}
		b.prog.clear()
		for i, r := range res {
			b.record(r, b.lines[i])
		}
		_ = b.out.Flush()
	}
}

// record reports what became of the job of input line n.
func (b *batchInserter) record(res queue.Result, n int) {
	rep := &b.rep
	switch {
	case errors.Is(res.Err, queue.ErrQueueFull):
		rep.refused = append(rep.refused, n)
		if rep.full == nil {
			errors.As(res.Err, &rep.full)
		}
	case errors.Is(res.Err, queue.ErrOutcomeUnknown):
		rep.unknown = append(rep.unknown, n)
	case res.Err != nil:
		rep.notInserted = append(rep.notInserted, n)
	default:
		fmt.Fprintln(b.out, shown(res.ID))
		switch {
		case res.Duplicate:
			rep.held++
			if res.ArgsDropped {
				rep.argsDropped++
			}
		case res.Existed:
			rep.existed++
		default:
			rep.inserted++
		}
	}
}

// reportBatch writes what a batch did to stderr.
func (e *env) reportBatch(rep batchReport, batch uuid.UUID, failure error) {
	msg := fmt.Sprintf("%d inserted, %d already there", rep.inserted, rep.existed)
	if rep.held > 0 {
		msg += fmt.Sprintf(", %d not added (a job holds the unique key; its id printed)", rep.held)
		if rep.argsDropped > 0 {
			msg += fmt.Sprintf(", %d of them with args that differ from the holder's, in no job", rep.argsDropped)
		}
	}
	if len(rep.refused) > 0 {
		msg += fmt.Sprintf(", %d refused (%v)", len(rep.refused), rep.full)
	}
	msg += fmt.Sprintf(", %d not inserted", len(rep.notInserted)+len(rep.unknown))
	if len(rep.unknown) > 0 {
		msg += fmt.Sprintf(" (%d of which may have been: looking them up failed)", len(rep.unknown))
	}
	fmt.Fprintf(e.stderr, "enqueue batch: %s\n", msg)
	if len(rep.refused) > 0 {
		fmt.Fprintf(e.stderr, "enqueue batch: refused, their queue full: lines %s\n", lineRanges(rep.refused))
	}
	if failure == nil {
		return
	}
	if len(rep.notInserted) > 0 {
		fmt.Fprintf(e.stderr, "enqueue batch: not inserted: lines %s\n", lineRanges(rep.notInserted))
	}
	if len(rep.unknown) > 0 {
		fmt.Fprintf(e.stderr, "enqueue batch: not known whether inserted: lines %s\n", lineRanges(rep.unknown))
	}
	fmt.Fprintf(e.stderr, "enqueue batch: to insert only what is missing, run again with the same input and --batch-id %s\n", batch)
}

// lineRanges writes sorted line numbers as "3, 7-9, 12", eliding the
// middle of a long list.
func lineRanges(lines []int) string {
	var parts []string
	for i := 0; i < len(lines); {
		j := i
		for j+1 < len(lines) && lines[j+1] == lines[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(lines[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", lines[i], lines[j]))
		}
		i = j + 1
	}
	if len(parts) > 20 {
		parts = append(append(parts[:10:10], fmt.Sprintf("... (%d more ranges) ...", len(parts)-20)), parts[len(parts)-10:]...)
	}
	return strings.Join(parts, ", ")
}
