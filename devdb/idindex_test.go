package devdb

import (
	"context"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Every collection's table has an index on the expression FerretDB's
// lookups by _id use, its _id index (made by devdb's FerretDB on that
// expression), SQLite takes it for those lookups, and results are what
// they were. A collection dropped and made again has it again.
func TestLookupsByIDUseAnIndex(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testLookupsByIDUseAnIndex(t, startServer(t)) })
	// The indexer opens the database files by URI: a space must reach the
	// file name as it is ('?', '#' and '%' are refused at Start), for the
	// covering index it adds.
	t.Run("directory-with-a-space", func(t *testing.T) {
		testLookupsByIDUseAnIndex(t, startServerIn(t, filepath.Join(t.TempDir(), "a b"), "127.0.0.1:0"))
	})
}

func testLookupsByIDUseAnIndex(t *testing.T, s *Server) {
	mc := connect(t, s.URI())
	ctx := context.Background()
	coll := mc.Database("ix").Collection("jobs")

	docs := make([]any, 200)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: "j" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)}, {Key: "n", Value: i}}
	}
	for round := range 2 {
		_, err := coll.InsertMany(ctx, docs)
		require.NoError(t, err)

		_, err = coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "n", Value: 1}, {Key: "_id", Value: 1}}})
		require.NoError(t, err)
		waitForIndex(t, filepath.Join(s.Dir(), "ix.sqlite"), "__devdb_s_n,_id")
		plan := waitForLookupIndex(t, filepath.Join(s.Dir(), "ix.sqlite"))
		require.Regexp(t, `USING INDEX \S+__id_ \(`, plan, "round %d: SQLite's plan for FerretDB's lookup by _id", round)

		res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "jcx"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "seen", Value: true}}}})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.ModifiedCount)
		var got bson.M
		require.NoError(t, coll.FindOne(ctx, bson.D{{Key: "_id", Value: "jcx"}}).Decode(&got))
		require.Equal(t, true, got["seen"])
		require.EqualValues(t, 28, got["n"])
		n, err := coll.CountDocuments(ctx, bson.D{})
		require.NoError(t, err)
		require.EqualValues(t, len(docs), n)

		require.NoError(t, coll.Drop(ctx))
	}
}

// waitForLookupIndex waits for an index of the table of the one
// collection in file to serve FerretDB's update by _id there, and returns
// SQLite's plan for it.
func waitForLookupIndex(t *testing.T, file string) string {
	t.Helper()
	db := openReadOnly(t, file)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var table string
		err := db.QueryRow(`SELECT table_name FROM _ferretdb_collections`).Scan(&table)
		if err == nil {
			var plan strings.Builder
			rows, err := db.Query(`EXPLAIN QUERY PLAN UPDATE "`+table+`" SET _ferretdb_sjson = ? WHERE `+idLookupExpr+` = ?`, "{}", `"x"`)
			require.NoError(t, err)
			for rows.Next() {
				var id, parent, notused int
				var detail string
				require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
				plan.WriteString(detail + "\n")
			}
			require.NoError(t, rows.Close())
			if strings.Contains(plan.String(), "USING INDEX") || time.Now().After(deadline) {
				return plan.String()
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("no collection table in %s: %v", file, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCoveringExpressionsMatchTheOverlays: the covering indexes devdb
// adds serve devdb's FerretDB's sorted finds only if its queries name the
// very expressions the indexes hold, which _overlay/sqlite_collection.go
// spells in constants of its own (it is built inside FerretDB's module).
func TestCoveringExpressionsMatchTheOverlays(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("_overlay", "sqlite_collection.go"), nil, 0)
	require.NoError(t, err)
	got := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if s, ok := stringConst(vs.Values[i]); ok {
						got[name.Name] = s
					}
				}
			}
		}
		return true
	})
	for name, want := range map[string]string{
		"coveringInfix": coveringInfix, "oddInfix": oddInfix, "coveringOrdered": coveringOrdered, "coveringValue": coveringValue, "coveringType": coveringType, "coveringRank": coveringRank,
	} {
		require.Equal(t, want, got[name], "the overlay's %s", name)
	}
}

// TestOddIndexRuleMatchesTheOverlays: the partial index of the documents a
// walk of a covering index would misplace is made here and read by the
// overlay's walks (INDEXED BY, with the same WHERE): both must hold the
// same keys and condition, or every walk is refused.
func TestOddIndexRuleMatchesTheOverlays(t *testing.T) {
	bodies := func(file string) map[string]string {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, file, nil, 0)
		require.NoError(t, err)
		out := map[string]string{}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				var b strings.Builder
				require.NoError(t, printer.Fprint(&b, fset, fd.Type))
				require.NoError(t, printer.Fprint(&b, fset, fd.Body))
				out[fd.Name.Name] = b.String()
			}
		}
		return out
	}
	here, overlay := bodies("idindex.go"), bodies(filepath.Join("_overlay", "sqlite_collection.go"))
	for _, name := range []string{"oddKeys", "oddWhere", "coveringRankOf"} {
		require.NotEmpty(t, here[name], name)
		require.Equal(t, here[name], overlay[name], "the overlay's %s", name)
	}
}

// stringConst evaluates a string literal or a sum of them.
func stringConst(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		a, ok1 := stringConst(e.X)
		b, ok2 := stringConst(e.Y)
		return a + b, ok1 && ok2 && e.Op == token.ADD
	}
	return "", false
}
