package devdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	_ "modernc.org/sqlite" // the driver FerretDB's SQLite backend uses too
)

// FerretDB v1's SQLite backend stores each collection as a table of JSON
// documents and looks a document up by _id (a find, update or delete whose
// filter is {_id: X}, and every write of a document it has updated) with
// WHERE _ferretdb_sjson->'$._id' = ?. The unique index it creates on _id is
// on the expression _ferretdb_sjson->"_id", which SQLite does not take for
// the same one, so each of those lookups reads the whole table: 140 ms per
// document written in a collection of 20,000. The indexer gives every
// table an index on the very expression of the lookups, which SQLite then
// uses: a write of one document costs the same whatever the collection's
// size. It changes no result, only how SQLite finds the rows. devdb's
// FerretDB now makes its indexes on the lookup expressions
// (_overlay/sqlite_metadata_registry.go): the indexer adds none where such
// an index serves the lookup (lookupServed), only to the tables of data
// directories made by earlier versions, so that a write updates one index
// per expression, not two.
const (
	// idLookupExpr is the expression FerretDB's lookups by _id use.
	idLookupExpr = `_ferretdb_sjson->'$._id'`
	// idLookupSuffix names the index: "<table>__devdb_id_lookup".
	idLookupSuffix = "__devdb_id_lookup"
	// devdbInfix begins the name of each of devdb's indexes after its
	// table's.
	devdbInfix = "__devdb_"
	// indexEvery is how often the indexer looks for new tables.
	indexEvery = time.Second
	// indexTimeout bounds the build of one index (a few seconds for a
	// table of a million documents), and readTimeout the indexer's reads
	// of a file's tables and indexes.
	indexTimeout = 5 * time.Minute
	readTimeout  = 30 * time.Second
)

// The same holds for a field: devdb's FerretDB (see _overlay) pushes down
// an equality to a string, {state: "available"}, as
// _ferretdb_sjson->'$.state' compared with that string's JSON text (or an
// array's), which FerretDB's own index on the field does not serve either.
// For each field that one of a collection's indexes starts with, the
// indexer adds an index on the field's lookup expression too: a claim's
// {state: "available", ...} then reads the available jobs only, however
// many finished ones the collection holds. It is partial, holding only
// the documents that have the field (an equality or $in implies it, so
// SQLite still takes it for those; a find with {field: {$exists: true}},
// docket's due pass, reads it rather than the others): writing a
// document costs nothing for the many such fields a document lacks (a
// job's slots, unique keys and workflow fields).
const (
	// fieldLookupExpr is the expression of a field's lookups (%s: its name).
	fieldLookupExpr = `_ferretdb_sjson->'$.%s'`
	// fieldLookupInfix names such an index: "<table>__devdb_f_<field>".
	fieldLookupInfix = "__devdb_f_"
	// fieldLookupWhere is its WHERE clause (%s: the lookup expression).
	fieldLookupWhere = ` WHERE %s IS NOT NULL`
)

// And for sorts: devdb's FerretDB (querySorted in _overlay) sorts a
// limited find on top-level fields by reading each matching document's
// sort fields, which makes SQLite parse every matching document's JSON (a
// claim's read of candidates at a backlog of 20,000: 0.85 s). For each of
// a collection's indexes on two or more top-level fields, the indexer adds
// a covering index holding, for each key in the index's direction, the
// rank of its BSON type and its SQL value (coveringColumns), from which
// SQLite can seek a filter's string equalities and sort by the keys
// without reading a row (orderByIndex in _overlay, which holds the same
// expressions: TestCoveringExpressionsMatchTheOverlays). The index's name
// lists the keys, a descending one with a minus,
// "<table>__devdb_s_state,queue,kind,-priority,runAt,_id", which is how
// the query finds it. A sorted read whose filter sets the keys before the
// sort's to strings walks the covering index in order and stops at its
// limit, where it would otherwise sort every match (a claim's read at a
// backlog of 100,000: about 0.1 s), but only while no matching document
// has a key of a type SQL does not order as BSON does (an array sorts by
// its least or greatest element, not where its type's rank puts it):
// beside the covering index, a partial index holds only the documents with
// such a value in one of its later keys (oddKeys), which a walk finds
// empty; it seeks the covering index for the others.
const (
	coveringInfix = "__devdb_s_"
	// oldCoveringInfix named the covering indexes of earlier devdb
	// versions, keyed value first: the indexer drops them.
	oldCoveringInfix = "__devdb_c_"
	// oddInfix names the partial index of the documents with a value of
	// such a type in one of the covering index's later keys (oddKeys):
	// "<table>__devdb_o_<keys>".
	oddInfix      = "__devdb_o_"
	coveringValue = `_ferretdb_sjson->>'$.%s'`
	coveringType  = `_ferretdb_sjson->>'$."$s".p.%s.t'`
	coveringRank  = `CASE coalesce(%s, 'null') WHEN 'null' THEN 1 WHEN 'int' THEN 2 WHEN 'long' THEN 2 WHEN 'double' THEN 2 ` +
		`WHEN 'string' THEN 3 WHEN 'object' THEN 4 WHEN 'array' THEN 5 WHEN 'binData' THEN 6 WHEN 'objectId' THEN 7 ` +
		`WHEN 'bool' THEN 8 WHEN 'date' THEN 9 WHEN 'timestamp' THEN 10 WHEN 'regex' THEN 11 ELSE 99 END`
	coveringOrdered = `1, 2, 3, 7, 8, 9`
)

// coveringColumns is the column list of the covering index on keys (a
// descending key written "-name"): each key's rank, then its value.
func coveringColumns(keys []string) string {
	cols := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		name, dir := strings.TrimPrefix(k, "-"), ""
		if name != k {
			dir = " DESC"
		}
		cols = append(cols, coveringRankOf(name)+dir, fmt.Sprintf(coveringValue, name)+dir)
	}
	return strings.Join(cols, ", ")
}

func coveringRankOf(k string) string { return fmt.Sprintf(coveringRank, fmt.Sprintf(coveringType, k)) }

// oddKeys are the keys of the covering index on keys that a walk of it
// (with two keys set by the filter or more) can sort by after its first
// sort key: all but the first three, and _id (never an array).
func oddKeys(keys []string) []string {
	var odd []string
	for _, k := range keys[min(3, len(keys)):] {
		if k = strings.TrimPrefix(k, "-"); k != "_id" {
			odd = append(odd, k)
		}
	}
	return odd
}

// oddWhere is the condition of the partial index of the documents with a
// value in one of keys of a type SQL does not order as BSON does.
func oddWhere(keys []string) string {
	conds := make([]string, len(keys))
	for i, k := range keys {
		conds[i] = fmt.Sprintf(`%s NOT IN (%s)`, coveringRankOf(k), coveringOrdered)
	}
	return "(" + strings.Join(conds, " OR ") + ")"
}

// indexKeys finds the fields of an index FerretDB made for a collection's
// index, in its CREATE INDEX statement: ... (_ferretdb_sjson->'$.state',
// _ferretdb_sjson->'$.priority' DESC, ...), or ->"state" in an index of an
// earlier devdb version (indexKey): the keys up to the first that is
// not a plain top-level name (a dotted path), a descending one as "-name",
// and whether that is all of them. Only plain names: the lookup expressions take them as they are.
// devdb's own indexes are not read.
func indexKeys(def string) (keys []string, all bool) {
	open := strings.IndexByte(def, '(')
	if open < 0 {
		return nil, false
	}
	end := strings.IndexByte(def[open:], ')') + open // the keys hold none; a WHERE may follow
	if end < open {
		return nil, false
	}
	for _, col := range strings.Split(def[open+1:end], ",") {
		m := indexKey.FindStringSubmatch(strings.TrimSpace(col))
		if m == nil {
			return keys, false
		}
		name := m[1] + m[2]
		if m[3] != "" {
			name = "-" + name
		}
		keys = append(keys, name)
	}
	return keys, true
}

// indexKey matches a key of FerretDB's index on a top-level field: its
// own expression, ->"name" (in data directories of earlier devdb
// versions), or the lookup expression, ->'$.name' (devdb's FerretDB now).
var indexKey = regexp.MustCompile(`^_ferretdb_sjson->(?:"([A-Za-z_][A-Za-z0-9_]*)"|'\$\.([A-Za-z_][A-Za-z0-9_]*)')( DESC)?$`)

// lookupServed is the expression of def's index's first key when SQLite
// takes the index for a lookup of that expression: the index is not
// partial, or holds every row where the key is set (a lookup, = or IN,
// implies it); empty otherwise.
func lookupServed(def string) string {
	open := strings.IndexByte(def, '(')
	if open < 0 {
		return ""
	}
	end := strings.IndexAny(def[open:], ",)") + open
	if end < open {
		return ""
	}
	expr := strings.TrimSuffix(strings.TrimSpace(def[open+1:end]), " DESC")
	if i := strings.LastIndex(def, ") WHERE "); i >= 0 && def[i+len(") WHERE "):] != expr+" IS NOT NULL" {
		return ""
	}
	return expr
}

// idIndexer adds the lookup index to the tables of the SQLite files in dir
// as they appear, creating each under the front's lock (no command runs
// meanwhile; building it on a table already large takes a moment).
type idIndexer struct {
	dir    string
	lock   func()
	unlock func()
	log    *zap.Logger

	seen map[string]time.Time // file → its last change looked at

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func startIDIndexer(dir string, lock, unlock func(), log *zap.Logger) *idIndexer {
	ix := &idIndexer{dir: dir, lock: lock, unlock: unlock, log: log, seen: map[string]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go ix.loop()
	return ix
}

func (ix *idIndexer) loop() {
	defer close(ix.done)
	t := time.NewTicker(indexEvery)
	defer t.Stop()
	for {
		ix.pass()
		select {
		case <-t.C:
		case <-ix.stop:
			return
		}
	}
}

// indexNow indexes the tables of database db at once, so that the
// indexes a createIndexes asks for are followed by devdb's before the
// client can fill the collection (built on an empty table they cost
// nothing; the pass a second later would build them on what the client
// wrote meanwhile, under the lock, and leave the client's first claims to
// sort without them).
func (ix *idIndexer) indexNow(db string) {
	f := filepath.Join(ix.dir, db+".sqlite")
	if filepath.Dir(f) != filepath.Clean(ix.dir) {
		return // not a name FerretDB would give a database
	}
	if _, err := os.Stat(f); err != nil {
		return // no such database (dropped meanwhile): nothing to index
	}
	if err := ix.indexFile(f); err != nil {
		ix.log.Debug("could not index at once; the next pass will", zap.String("file", filepath.Base(f)), zap.Error(err))
	}
}

// close stops the indexer and waits for a pass under way.
func (ix *idIndexer) close() {
	ix.once.Do(func() { close(ix.stop) })
	<-ix.done
}

// pass indexes the tables of every database file changed since the last
// pass that looked at it.
func (ix *idIndexer) pass() {
	files, err := filepath.Glob(filepath.Join(ix.dir, "*.sqlite"))
	if err != nil {
		return
	}
	for _, f := range files {
		changed := lastChange(f)
		if last, ok := ix.seen[f]; ok && !changed.After(last) {
			continue
		}
		if err := ix.indexFile(f); err != nil {
			if _, serr := os.Stat(f); serr != nil {
				continue // the database was dropped meanwhile: nothing to index
			}
			ix.log.Warn("could not index _id lookups; lookups by _id in this database scan its tables",
				zap.String("file", filepath.Base(f)), zap.Error(err))
			continue // looked at again next pass
		}
		ix.seen[f] = changed
	}
}

// lastChange is the latest modification time of a database file and of
// its write-ahead log, where new tables appear first.
func lastChange(f string) time.Time {
	var t time.Time
	for _, p := range []string{f, f + "-wal"} {
		if st, err := os.Stat(p); err == nil && st.ModTime().After(t) {
			t = st.ModTime()
		}
	}
	return t
}

// indexFile creates the lookup index on each collection table of the
// database file f that lacks it.
func (ix *idIndexer) indexFile(f string) error {
	// A URI, escaped: the data directory may hold '?', '#' or '%'.
	dsn := (&url.URL{Scheme: "file", Path: f, RawQuery: "_pragma=busy_timeout(10000)"}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()

	tables, err := collectionTables(ctx, db)
	if err != nil || len(tables) == 0 {
		return err
	}
	ixs, err := readIndexes(ctx, db)
	if err != nil {
		return err
	}
	if err := ix.drop(db, ixs.stale); err != nil {
		return err
	}
	for _, l := range ixs.wanted(tables) {
		if !ixs.have[l.name] {
			if err := ix.create(db, f, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// indexes are what readIndexes found of a file's indexes.
type indexes struct {
	have     map[string]bool
	served   map[string][]string   // table → lookup expressions its collection's indexes serve (lookupServed)
	leading  map[string][]string   // table → fields its collection's indexes lead with
	compound map[string][][]string // table → keys of its collection's indexes on two or more fields
	stale    []string              // indexes of an earlier devdb, no longer read
}

// readIndexes reads the indexes of db.
func readIndexes(ctx context.Context, db *sql.DB) (indexes, error) {
	ixs := indexes{have: map[string]bool{}, served: map[string][]string{}, leading: map[string][]string{}, compound: map[string][][]string{}}
	rows, err := db.QueryContext(ctx, `SELECT name, tbl_name, coalesce(sql, '') FROM sqlite_master WHERE type = 'index'`)
	if err != nil {
		return ixs, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, table, def string
		if err := rows.Scan(&name, &table, &def); err != nil {
			return ixs, err
		}
		ixs.have[name] = true
		if strings.Contains(name, oldCoveringInfix) {
			ixs.stale = append(ixs.stale, name)
		}
		if strings.HasPrefix(name, table+devdbInfix) { // devdb's own
			continue
		}
		if expr := lookupServed(def); expr != "" {
			ixs.served[table] = append(ixs.served[table], expr)
		}
		keys, all := indexKeys(def)
		if len(keys) > 0 && keys[0] != "_id" && !slices.Contains(ixs.leading[table], strings.TrimPrefix(keys[0], "-")) {
			ixs.leading[table] = append(ixs.leading[table], strings.TrimPrefix(keys[0], "-"))
		}
		if all && len(keys) >= 2 {
			ixs.compound[table] = append(ixs.compound[table], keys)
		}
	}
	return ixs, errors.Join(rows.Err(), rows.Close())
}

// lookup is an index devdb adds to a table: its name, its columns and its
// WHERE clause.
type lookup struct{ table, name, expr, where string }

// wanted lists the indexes devdb adds to tables: no lookup index where
// one of the collection's indexes serves that lookup already (made by
// devdb's FerretDB on the lookup expression: an index less to update at
// each write).
func (ixs indexes) wanted(tables []string) []lookup {
	var todo []lookup
	for _, t := range tables {
		if !slices.Contains(ixs.served[t], idLookupExpr) {
			todo = append(todo, lookup{t, t + idLookupSuffix, idLookupExpr, ""})
		}
		for _, f := range ixs.leading[t] {
			if expr := fmt.Sprintf(fieldLookupExpr, f); !slices.Contains(ixs.served[t], expr) {
				todo = append(todo, lookup{t, t + fieldLookupInfix + f, expr, fmt.Sprintf(fieldLookupWhere, expr)})
			}
		}
		for _, keys := range ixs.compound[t] {
			named := strings.Join(keys, ",")
			todo = append(todo, lookup{t, t + coveringInfix + named, coveringColumns(keys), ""})
			if odd := oddKeys(keys); len(odd) > 0 {
				todo = append(todo, lookup{t, t + oddInfix + named, fmt.Sprintf(coveringValue, odd[0]), " WHERE " + oddWhere(odd)})
			}
		}
	}
	return todo
}

// create creates the index l in db, of the file f, under the front's lock.
func (ix *idIndexer) create(db *sql.DB, f string, l lookup) error {
	start := time.Now()
	ix.lock()
	// Timed from when the lock is held: commands queued before it (a big
	// insert) are not the index's time.
	ctx, cancel := context.WithTimeout(context.Background(), indexTimeout)
	_, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s (%s)%s`, quoteIdent(l.name), quoteIdent(l.table), l.expr, l.where))
	cancel()
	ix.unlock()
	if err != nil && !isNoSuchTable(err) { // dropped meanwhile: nothing to index
		return fmt.Errorf("index table %s: %w", l.table, err)
	}
	ix.log.Debug("indexed lookups", zap.String("file", filepath.Base(f)), zap.String("table", l.table), zap.String("index", l.name),
		zap.Duration("took", time.Since(start)))
	return nil
}

// drop drops the indexes names of db, under the front's lock.
func (ix *idIndexer) drop(db *sql.DB, names []string) error {
	for _, name := range names {
		ix.lock()
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		_, err := db.ExecContext(ctx, `DROP INDEX IF EXISTS `+quoteIdent(name))
		cancel()
		ix.unlock()
		if err != nil {
			return fmt.Errorf("drop index %s: %w", name, err)
		}
	}
	return nil
}

// collectionTables lists the tables of FerretDB's collections in db; none
// when the file has no collection yet.
func collectionTables(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT table_name FROM _ferretdb_collections`)
	if err != nil {
		if isNoSuchTable(err) {
			return nil, nil
		}
		return nil, err
	}
	defer rows.Close()
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	return tables, rows.Err()
}

func isNoSuchTable(err error) bool { return strings.Contains(err.Error(), "no such table") }

// quoteIdent quotes an SQLite identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
