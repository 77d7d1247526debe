package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"io"

	"github.com/docketq/docket/handlers"
	"github.com/docketq/docket/jobs"
	"github.com/docketq/docket/queue"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func init() {
	subcommands["publish"] = subcommand{"publish a new version of a tree: --tree T --file tree.json (or - for stdin)", publishCommand}
	subcommands["tree-show"] = subcommand{"print a published version of a tree as JSON: --tree T [--version V]", treeShowCommand}
}

// treeFile is the JSON a tree is published from:
//
//	{"nodes": [{"id": "root", "data": {...}}, {"id": "fruit", "parent": "root", "data": {...}}]}
//
// data is any JSON object (MongoDB extended JSON allowed); one node, the
// root, has no parent.
type treeFile struct {
	Nodes []struct {
		ID     string          `json:"id"`
		Parent string          `json:"parent"`
		Data   json.RawMessage `json:"data"`
	} `json:"nodes"`
}

func publishCommand(fs *flag.FlagSet) func(*env, []string) error {
	tree := fs.String("tree", "", "the tree's id (required)")
	file := fs.String("file", "", "the tree as JSON, - for stdin (required)")
	var o queue.InsertOpts
	runAt := insertOptsFlags(fs, &o)
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		if *file == "" {
			return badInput("--file is required")
		}
		r, done, err := e.input(*file)
		if err != nil {
			return err
		}
		defer done()
		dec := json.NewDecoder(io.LimitReader(r, jobs.MaxArgsBytes+1))
		dec.DisallowUnknownFields()
		var tf treeFile
		if err := dec.Decode(&tf); err != nil {
			return badInput("--file: not a tree (see `enqueue publish --help`): %v", err)
		}
		args := handlers.PublishTreeArgs{Tree: *tree}
		for i, n := range tf.Nodes {
			node := handlers.TreeNode{ID: n.ID, Parent: n.Parent}
			if len(n.Data) > 0 && string(n.Data) != "null" {
				d, err := parseArgs(string(n.Data))
				if err != nil {
					return badInput("--file: nodes[%d].data: %v", i, err)
				}
				node.Data = d
			}
			args.Nodes = append(args.Nodes, node)
		}
		if err := args.Validate(); err != nil {
			return usageError{err}
		}
		if err := parseRunAt(*runAt, &o); err != nil {
			return err
		}
		return enqueueAndPrint(e, []queue.Insert{{Kind: args.Kind(), Args: args, Opts: o}})
	}
}

func treeShowCommand(fs *flag.FlagSet) func(*env, []string) error {
	tree := fs.String("tree", "", "the tree's id (required)")
	version := fs.Int64("version", 0, "the published version to show (default: the latest)")
	return func(e *env, rest []string) error {
		if len(rest) > 0 {
			return badInput("unexpected argument %q", rest[0])
		}
		if *tree == "" {
			return badInput("--tree is required")
		}
		if *version < 0 {
			return badInput("--version: %d must not be negative", *version)
		}
		t, err := handlers.ReadTree(e.ctx, e.db, *tree, *version)
		if errors.Is(err, handlers.ErrTreeNotFound) || errors.Is(err, handlers.ErrTreeVersionNotFound) {
			return usageError{err}
		}
		if err != nil {
			return err
		}
		nodes := bson.A{}
		for _, n := range t.Nodes {
			d := bson.D{{Key: "id", Value: n.ID}}
			if n.Parent != "" {
				d = append(d, bson.E{Key: "parent", Value: n.Parent})
			}
			if len(n.Data) > 0 {
				d = append(d, bson.E{Key: "data", Value: n.Data})
			}
			nodes = append(nodes, d)
		}
		out, err := bson.MarshalExtJSON(bson.D{{Key: "tree", Value: t.ID}, {Key: "version", Value: t.Version}, {Key: "nodes", Value: nodes}}, false, false)
		if err != nil {
			return err
		}
		return printJSON(e.stdout, out)
	}
}
